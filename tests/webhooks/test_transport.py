"""The webhook transport against real HTTP(S) receivers on 127.0.0.1 (no mocked requests)."""

import datetime
import errno
import http.server
import ipaddress
import socket
import ssl
import threading
import time
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_pgqueue.webhooks import breaker
from django_pgqueue.webhooks.transport import (
    MAX_RETRY_AFTER_SECONDS,
    TransportResult,
    WebhookTransport,
    _watchdog,
    parse_retry_after,
)

from ..support import hostile as hostile_receiver
from ..support.hostile import HostileReceiver

LOOPBACK = ["127.0.0.0/8"]


class FakeResolver:
    """Answers a fixed sequence of DNS responses; the last one repeats. Counts lookups."""

    def __init__(self, *answers):
        self.answers = [list(a) for a in answers]
        self.calls = 0

    def __call__(self, host, port):
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return answer


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def setup(self):
        super().setup()
        self.server.receiver.connections += 1

    def log_message(self, format, *args):  # keep test output clean
        pass

    def do_POST(self):
        receiver = self.server.receiver
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        with receiver.lock:
            receiver.requests.append(
                {"path": self.path, "headers": dict(self.headers.items()), "body": body}
            )
            receiver.hits[self.path] = receiver.hits.get(self.path, 0) + 1
        route = receiver.routes.get(self.path, _ok)
        try:
            route(self)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def send_simple(self, status, body=b"", headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _ok(handler):
    handler.send_simple(200, b'{"ok": true}', [("Content-Type", "application/json")])


class Receiver:
    """A threaded HTTP server on a loopback address recording what it receives."""

    def __init__(self, host="127.0.0.1", port=0, ssl_context=None):
        self.routes = {}
        self.requests = []
        self.hits = {}
        self.connections = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET

        class Server(http.server.ThreadingHTTPServer):
            address_family = family
            daemon_threads = True

        self.server = Server((host, port), _Handler)
        if ssl_context is not None:
            self.server.socket = ssl_context.wrap_socket(self.server.socket, server_side=True)
        self.server.receiver = self
        self.host = host
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def url(self, path="/"):
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{path}"

    def close(self):
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def transport():
    with WebhookTransport(
        allow_http=True,
        allow_networks=LOOPBACK,
        deny_addresses=(),
        connect_timeout=2.0,
        total_timeout=10.0,
    ) as t:
        yield t


def test_success_and_keep_alive_reuses_one_connection(receiver, transport):
    results = [
        transport.post(
            receiver.url("/hook"), b'{"n": %d}' % i, {"Content-Type": "application/json"}
        )
        for i in range(3)
    ]
    for result in results:
        assert result.ok
        assert result.status_code == 200
        assert result.body == b'{"ok": true}'
        assert result.truncated is False
        assert result.error is None
        assert result.address == "127.0.0.1"
        assert result.headers["Content-Type"] == "application/json"
        assert result.duration_ms >= 0
    assert [r["body"] for r in receiver.requests] == [b'{"n": 0}', b'{"n": 1}', b'{"n": 2}']
    assert receiver.connections == 1
    sent = receiver.requests[0]["headers"]
    assert sent["Accept-Encoding"] == "identity"
    assert sent["User-Agent"].startswith("django-pgqueue/")


def test_exactly_the_given_headers_and_bytes_are_sent(receiver, transport):
    # No session: nothing is merged in (no default Accept, Connection or cookie headers),
    # a caller's Accept-Encoding and Content-Length cannot win, the body goes as given.
    body = b'{"type": "x", "data": "\xc3\xa9"}'
    result = transport.post(
        receiver.url("/hook"),
        body,
        {"webhook-id": "msg_1", "accept-encoding": "gzip", "Content-Length": "1"},
    )
    assert result.ok
    (sent,) = receiver.requests
    assert sent["body"] == body
    assert {k.lower(): v for k, v in sent["headers"].items()} == {
        "webhook-id": "msg_1",
        "accept-encoding": "identity",
        "content-length": str(len(body)),
        "user-agent": sent["headers"]["User-Agent"],
        "host": f"127.0.0.1:{receiver.port}",
    }


def test_cookies_a_receiver_sets_are_never_sent_back(receiver, transport):
    receiver.routes["/cookie"] = lambda h: h.send_simple(200, b"", [("Set-Cookie", "s=1")])
    assert transport.post(receiver.url("/cookie"), b"{}", {}).ok
    assert transport.post(receiver.url("/hook"), b"{}", {}).ok
    assert [r["headers"].get("Cookie") for r in receiver.requests] == [None, None]


def test_header_injection_is_refused_before_sending(receiver, transport):
    result = transport.post(receiver.url("/hook"), b"{}", {"X-Evil": "a\r\nX-Injected: 1"})
    assert result.status_code is None
    assert "InvalidHeader" in result.error
    assert receiver.requests == []


def test_the_watchdog_holds_only_requests_in_flight(receiver, transport):
    for _ in range(3):
        assert transport.post(receiver.url("/hook"), b"{}", {}).ok
    assert not _watchdog._active  # finished requests are not kept until their deadline


def test_server_error_is_a_response_not_a_transport_error(receiver, transport):
    receiver.routes["/fail"] = lambda h: h.send_simple(500, b"boom", [("Retry-After", "30")])
    result = transport.post(receiver.url("/fail"), b"{}", {})
    assert result.status_code == 500
    assert result.error is None
    assert result.ok is False
    assert result.body == b"boom"
    assert parse_retry_after(result.headers["Retry-After"]) == 30.0


def test_connection_refused(transport):
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens on this port now
    result = transport.post(f"http://127.0.0.1:{port}/", b"{}", {})
    assert result.status_code is None
    assert result.error == "connection refused"


@pytest.fixture
def unanswered_port():
    """A port whose accept queue is full, so new SYNs are dropped and connects hang."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(64):
        filler = socket.socket()
        filler.settimeout(0.5)
        fillers.append(filler)
        try:
            filler.connect(("127.0.0.1", port))
        except TimeoutError:
            break
    else:
        pytest.skip("could not fill the accept queue on this platform")
    yield port
    for filler in fillers:
        filler.close()
    listener.close()


def test_connect_timeout(unanswered_port):
    with WebhookTransport(
        allow_http=True, allow_networks=LOOPBACK, deny_addresses=(), connect_timeout=0.5
    ) as transport:
        started = time.monotonic()
        result = transport.post(f"http://127.0.0.1:{unanswered_port}/", b"{}", {})
        elapsed = time.monotonic() - started
    assert result.status_code is None
    assert result.error == "connect timeout (0.5 s)"
    assert elapsed < 5


@pytest.mark.parametrize(
    "location_for",
    [lambda r: r.url("/second"), lambda r: "http://169.254.169.254/latest/meta-data/"],
)
def test_redirect_is_not_followed(receiver, transport, location_for):
    location = location_for(receiver)
    receiver.routes["/first"] = lambda h: h.send_simple(302, b"", [("Location", location)])
    result = transport.post(receiver.url("/first"), b"{}", {})
    assert result.status_code == 302
    assert result.error == "redirect 302 not followed"
    assert result.ok is False
    assert result.headers["Location"] == location
    assert receiver.hits == {"/first": 1}


def test_large_response_truncated_at_cap_without_draining(receiver, transport):
    size = 50 * 1024 * 1024

    def huge(handler):
        handler.send_response(200)
        handler.send_header("Content-Length", str(size))
        handler.end_headers()
        chunk = b"x" * 65536
        sent = 0
        while sent < size and not receiver.stop.is_set():
            handler.wfile.write(chunk)
            sent += len(chunk)

    receiver.routes["/huge"] = huge
    started = time.monotonic()
    result = transport.post(receiver.url("/huge"), b"{}", {})
    elapsed = time.monotonic() - started
    assert result.status_code == 200
    assert result.truncated is True
    assert len(result.body) == 20_000
    assert elapsed < 2
    # The truncated connection was closed, not reused: the next POST opens a new one.
    assert transport.post(receiver.url("/hook"), b"{}", {}).ok
    assert receiver.connections == 2


def test_slow_drip_cut_at_total_deadline(receiver):
    def drip(handler):
        handler.send_response(200)
        handler.send_header("Content-Length", "1000")
        handler.end_headers()
        handler.wfile.flush()
        for _ in range(1000):
            handler.wfile.write(b"x")
            handler.wfile.flush()
            if receiver.stop.wait(0.2):  # the pace under test, not synchronisation
                return

    receiver.routes["/drip"] = drip
    with WebhookTransport(
        allow_http=True, allow_networks=LOOPBACK, deny_addresses=(), total_timeout=1.5
    ) as transport:
        started = time.monotonic()
        result = transport.post(receiver.url("/drip"), b"{}", {})
        elapsed = time.monotonic() - started
    assert result.error == "total deadline of 1.5 s exceeded"
    assert 1.4 <= elapsed < 4.5


def test_slow_drip_headers_cut_at_total_deadline(receiver):
    def drip_status_line(handler):
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"y" * 1000:
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
            if receiver.stop.wait(0.2):
                return

    receiver.routes["/drip-headers"] = drip_status_line
    with WebhookTransport(
        allow_http=True, allow_networks=LOOPBACK, deny_addresses=(), total_timeout=1.5
    ) as transport:
        started = time.monotonic()
        result = transport.post(receiver.url("/drip-headers"), b"{}", {})
        elapsed = time.monotonic() - started
    assert result.status_code is None
    assert result.error == "total deadline of 1.5 s exceeded"
    assert elapsed < 4.5


def test_environment_proxies_ignored(receiver, monkeypatch):
    proxy = Receiver()
    try:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
            monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.port}")
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        resolver = FakeResolver(["127.0.0.1"])
        with WebhookTransport(
            allow_http=True, allow_networks=LOOPBACK, deny_addresses=(), resolver=resolver
        ) as transport:
            result = transport.post(f"http://hooks.example.test:{receiver.port}/hook", b"{}", {})
        assert result.ok
        assert receiver.hits == {"/hook": 1}
        assert proxy.connections == 0
    finally:
        proxy.close()


def test_host_header_keeps_the_name_when_connecting_by_ip(receiver):
    resolver = FakeResolver(["127.0.0.1"])
    with WebhookTransport(
        allow_http=True, allow_networks=LOOPBACK, deny_addresses=(), resolver=resolver
    ) as transport:
        result = transport.post(f"http://Hooks.Example.test:{receiver.port}/in", b"{}", {})
    assert result.ok
    assert result.address == "127.0.0.1"
    assert receiver.requests[0]["headers"]["Host"] == f"hooks.example.test:{receiver.port}"
    assert resolver.calls == 1


def test_allow_hosts_reach_an_internal_receiver(receiver):
    resolver = FakeResolver(["127.0.0.1"])
    with WebhookTransport(
        allow_http=True, allow_hosts=["hooks.internal.test"], deny_addresses=(), resolver=resolver
    ) as transport:
        allowed = transport.post(f"http://hooks.internal.test:{receiver.port}/in", b"{}", {})
        refused = transport.post(f"http://other.internal.test:{receiver.port}/in", b"{}", {})
    assert allowed.ok
    assert refused.error.startswith("refused:")
    assert receiver.hits == {"/in": 1}


def _bind_pair():
    """A receiver on 127.0.0.2 and a sentinel receiver on 127.0.0.1, on the same port."""
    for _ in range(20):
        good = Receiver("127.0.0.2")
        try:
            sentinel = Receiver("127.0.0.1", good.port)
        except OSError as exc:
            good.close()
            if exc.errno != errno.EADDRINUSE:
                raise
            continue
        return good, sentinel
    pytest.skip("could not bind the same port on 127.0.0.1 and 127.0.0.2")


def test_connects_to_the_checked_address_and_never_looks_up_again():
    # 127.0.0.2 plays the public address (the only allow-listed one), 127.0.0.1 the internal
    # one the attacker rebinds to. Every request resolves exactly once, through our resolver,
    # and lands where the check said; after the rebind nothing reaches the sentinel.
    try:
        good, sentinel = _bind_pair()
    except OSError:
        pytest.skip("127.0.0.2 is not usable on this machine")
    try:
        resolver = FakeResolver(["127.0.0.2"], ["127.0.0.2"], ["127.0.0.1"])
        url = f"http://rebind.example.test:{good.port}/hook"
        with WebhookTransport(
            allow_http=True,
            allow_networks=["127.0.0.2/32"],
            deny_addresses=(),
            resolver=resolver,
        ) as transport:
            first = transport.post(url, b"{}", {})
            second = transport.post(url, b"{}", {})
            third = transport.post(url, b"{}", {})
        assert first.ok and second.ok
        assert third.error == (
            "refused: The host 'rebind.example.test' points to a private or reserved "
            "address, which cannot receive webhooks."
        )
        assert resolver.calls == 3
        assert good.hits == {"/hook": 2}
        assert good.connections == 1
        assert sentinel.connections == 0
    finally:
        good.close()
        sentinel.close()


def test_ipv6_loopback_literal():
    try:
        server = Receiver("::1")
    except OSError:
        pytest.skip("IPv6 loopback not available")
    try:
        with WebhookTransport(
            allow_http=True, allow_networks=["::1/128"], deny_addresses=()
        ) as transport:
            result = transport.post(server.url("/v6"), b"{}", {})
        assert result.ok
        assert result.address == "::1"
        assert server.requests[0]["headers"]["Host"] == f"[::1]:{server.port}"
    finally:
        server.close()


def test_refusals_and_url_errors_are_results_not_exceptions(transport):
    assert transport.post("ftp://example.test/", b"{}", {}).error.startswith("refused:")
    refused = transport.post("http://10.0.0.1/", b"{}", {})
    assert refused.error.startswith("refused: The address 10.0.0.1 is a private or reserved")
    with WebhookTransport(deny_addresses=()) as https_only:
        assert "https://" in https_only.post("http://example.test/", b"{}", {}).error


def test_invalid_configuration_is_named():
    with pytest.raises(ValueError, match="total_timeout"):
        WebhookTransport(total_timeout=0)
    with pytest.raises(ValueError, match="response_cap"):
        WebhookTransport(response_cap=-1)
    with pytest.raises(ValueError, match="allow_networks"):
        WebhookTransport(allow_networks=["not-a-network"])


# --- TLS: certificate and SNI checked against the name, while connecting to the IP ---


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory = tmp_path_factory.mktemp("tls")
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pgqueue test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hooks.example.test")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("hooks.example.test")]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_path = directory / "ca.pem"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_path = directory / "cert.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path = directory / "key.pem"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(ca_path), str(cert_path), str(key_path)


@pytest.fixture
def tls_receiver(tls_files):
    _, cert_path, key_path = tls_files
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    server_names = []
    context.sni_callback = lambda sock, name, ctx: server_names.append(name)
    server = Receiver(ssl_context=context)
    server.server_names = server_names
    yield server
    server.close()


def test_https_sni_and_certificate_use_the_name(tls_files, tls_receiver):
    ca_path, _, _ = tls_files
    resolver = FakeResolver(["127.0.0.1"])
    with WebhookTransport(
        allow_networks=LOOPBACK, deny_addresses=(), resolver=resolver, verify=ca_path
    ) as transport:
        result = transport.post(f"https://hooks.example.test:{tls_receiver.port}/tls", b"{}", {})
    assert result.ok, result.error
    assert result.address == "127.0.0.1"
    assert tls_receiver.server_names == ["hooks.example.test"]
    assert tls_receiver.requests[0]["headers"]["Host"] == f"hooks.example.test:{tls_receiver.port}"


def test_https_certificate_for_another_name_is_refused(tls_files, tls_receiver):
    ca_path, _, _ = tls_files
    resolver = FakeResolver(["127.0.0.1"])
    with WebhookTransport(
        allow_networks=LOOPBACK, deny_addresses=(), resolver=resolver, verify=ca_path
    ) as transport:
        result = transport.post(f"https://other.example.test:{tls_receiver.port}/tls", b"{}", {})
    assert result.status_code is None
    assert result.error.startswith("TLS error:")
    assert tls_receiver.requests == []


# --- Retry-After ---

NOW = datetime.datetime(2025, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        (" 0 ", 0.0),
        (format_datetime(NOW + datetime.timedelta(seconds=90), usegmt=True), 90.0),
        ("Wed, 01 Jan 2025 12:05:00 GMT", 300.0),
        ("Wed, 01 Jan 2025 11:00:00 GMT", 0.0),
        ("-5", None),
        ("1.5", None),
        ("soon", None),
        ("", None),
        (None, None),
        ("Wed, 99 Foo 2025 12:05:00 GMT", None),
        ("\uff11\uff12\uff10", None),  # full-width digits
        ("9" * 400, MAX_RETRY_AFTER_SECONDS),  # float() of it overflows
        ("9" * 5000, MAX_RETRY_AFTER_SECONDS),  # int() of it refuses (over 4,300 digits)
        ("0" * 5000 + "7", 7.0),
        ("31622401", MAX_RETRY_AFTER_SECONDS),
        ("Fri, 31 Dec 9999 23:59:59 GMT", MAX_RETRY_AFTER_SECONDS),
        ("Mon, 01 Jan 0001 00:00:00 GMT", 0.0),
        ("Wed, 01 Jan 99999 12:05:00 GMT", None),
        ("Wed, 01 Jan 2025 99:99:99 GMT", None),
        ("Wed, 01 Jan 2025 12:05:00 +99999", None),
        ("12\x000", None),
        ("\x00", None),
        ("1e999", None),
        ("inf", None),
        ("nan", None),
        (b"120", None),  # not text at all
        (120, None),
    ],
)
def test_parse_retry_after(value, expected):
    assert parse_retry_after(value, now=NOW) == expected


_HEADER_TEXT = st.one_of(
    st.text(),
    st.text(alphabet=st.characters(max_codepoint=255)),  # what http.client decodes
    st.from_regex(r"\A\s*-?[0-9]{1,6000}\s*\Z"),
    st.integers().map(str),
    st.datetimes(timezones=st.just(datetime.UTC)).map(lambda d: format_datetime(d, usegmt=True)),
    st.builds(
        "{}, {:02d} {} {} {:02d}:{:02d}:{:02d} {}".format,
        st.sampled_from(["Mon", "Wed", "Foo", ""]),
        st.integers(-99, 999),
        st.sampled_from(["Jan", "Dec", "Xyz"]),
        st.integers(-(10**12), 10**12),
        st.integers(-99, 999),
        st.integers(-99, 999),
        st.integers(-99, 999),
        st.sampled_from(["GMT", "-0000", "+9999", "-2359", "UT", "\x00"]),
    ),
)


@given(_HEADER_TEXT)
def test_parse_retry_after_is_total(value):
    # Whatever a receiver sends: None or a finite delay within the cap, never an exception.
    delay = parse_retry_after(value, now=NOW)
    assert delay is None or (isinstance(delay, float) and 0.0 <= delay <= MAX_RETRY_AFTER_SECONDS)


@given(_HEADER_TEXT, st.sampled_from([429, 503, 500]))
def test_retry_delay_honours_any_retry_after_within_the_cap(value, status_code):
    conf = {"RETRY_SCHEDULE": [1, 5], "RETRY_JITTER": 0, "RETRY_AFTER_CAP": 3600.0}
    result = TransportResult(status_code=status_code, headers={"Retry-After": value})
    delay = breaker.retry_delay(1, 3, result, conf)
    assert delay is not None and 1.0 <= delay <= 3600.0


def test_parse_retry_after_defaults_to_current_time():
    future = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    delay = parse_retry_after(format_datetime(future, usegmt=True))
    assert 3500 < delay <= 3600


def test_parsed_addresses_are_ip_objects():
    # The deny list accepts strings and parses them once, naming a bad entry.
    with pytest.raises(ValueError, match="not-an-ip"):
        WebhookTransport(deny_addresses=["not-an-ip"])
    transport = WebhookTransport(deny_addresses=["10.0.0.5"])
    assert transport.deny_addresses == (ipaddress.ip_address("10.0.0.5"),)
    transport.close()


# --- stale kept-alive connections ---


@pytest.fixture
def hostile():
    with HostileReceiver() as server:
        yield server


def _second_request(behaviour):
    """Answer the first request of each connection; later ones get ``behaviour``."""
    first = hostile_receiver.answer(200, [("Content-Type", "application/json")], b'{"ok":true}')

    def route(exchange):
        (first if exchange.request.index == 0 else behaviour)(exchange)

    return route


@pytest.mark.parametrize("closing", ["close", "reset"], ids=["fin", "rst"])
def test_stale_kept_alive_connection_is_resent_once_on_a_fresh_one(hostile, transport, closing):
    # The receiver closes the kept-alive connection as the next POST arrives, never
    # having said "Connection: close": the same attempt resends on a new connection.
    hostile.routes["/stale"] = _second_request(
        hostile_receiver.reset() if closing == "reset" else lambda exchange: exchange.close()
    )
    first = transport.post(hostile.url("/stale"), b'{"n":1}', {})
    assert first.ok and first.note is None and first.log_text == ""
    second = transport.post(hostile.url("/stale"), b'{"n":2}', {})
    assert second.ok and second.error is None
    assert "kept-alive connection failed before any response" in second.note
    assert second.log_text.startswith("note: ")
    assert [(s.connection, s.index, s.body) for s in hostile.hits("/stale")] == [
        (1, 0, b'{"n":1}'),
        (1, 1, b'{"n":2}'),  # read, never answered
        (2, 0, b'{"n":2}'),  # the resend, on a fresh connection
    ]
    # The fresh connection is kept alive as usual.
    third = transport.post(hostile.url("/stale"), b'{"n":3}', {})
    assert third.note is not None and hostile.connections == 3


def test_fresh_connection_failing_is_never_resent(hostile, transport):
    hostile.routes["/close"] = lambda exchange: exchange.close()
    result = transport.post(hostile.url("/close"), b"{}", {})
    assert result.error.startswith("connection error") and result.note is None
    assert len(hostile.hits("/close")) == 1 and hostile.connections == 1


def test_resend_failing_too_is_one_failed_attempt_with_the_note(hostile, transport):
    # Only the first request ever is answered: the resend's fresh connection fails as well.
    hostile.routes["/down"] = lambda exchange: (
        hostile_receiver.answer()(exchange)
        if exchange.request.connection == 1 and exchange.request.index == 0
        else exchange.close()
    )
    assert transport.post(hostile.url("/down"), b"{}", {}).ok
    result = transport.post(hostile.url("/down"), b"{}", {})
    assert result.error.startswith("connection error") and result.note
    assert result.log_text.startswith("connection error") and "(note: " in result.log_text
    assert len(hostile.hits("/down")) == 3  # one answered, then exactly two tries


@pytest.mark.parametrize(
    "partial",
    [b"HTTP/1.1 2", b"H", b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 503 Busy\r\nRetry-Af"],
    ids=["status-line", "one-byte", "interim-100", "headers"],
)
@pytest.mark.parametrize("then", ["close", "reset"])
def test_no_resend_once_a_response_byte_arrived(hostile, transport, partial, then):
    hostile.routes["/partial"] = _second_request(hostile_receiver.raw(partial, then=then))
    assert transport.post(hostile.url("/partial"), b"{}", {}).ok
    result = transport.post(hostile.url("/partial"), b"{}", {})
    assert not result.ok and result.note is None
    assert len(hostile.hits("/partial")) == 2 and hostile.connections == 1


def test_no_resend_after_a_timeout_on_a_kept_alive_connection(hostile):
    hostile.routes["/slow"] = _second_request(hostile_receiver.stall())
    with WebhookTransport(
        allow_http=True, allow_networks=LOOPBACK, deny_addresses=(), total_timeout=1.0
    ) as transport:
        assert transport.post(hostile.url("/slow"), b"{}", {}).ok
        result = transport.post(hostile.url("/slow"), b"{}", {})
    assert "deadline" in result.error or "timeout" in result.error
    assert result.note is None and len(hostile.hits("/slow")) == 2
