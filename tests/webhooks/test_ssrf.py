"""SSRF guard: every vector of the block-list is refused, with and without an allow-list.

No test makes an external connection: public addresses come from fake resolvers and are
only classified; the only sockets opened go to listeners on 127.0.0.1 started here.
"""

import contextlib
import ipaddress
import re
import socket
import threading

import pytest

from django_pgqueue.webhooks.ssrf import (
    UnsafeURLError,
    check_host,
    is_address_allowed,
    resolve_host,
    validate_url,
)
from django_pgqueue.webhooks.transport import WebhookTransport

PUBLIC_V4 = "93.184.215.14"
PUBLIC_V6 = "2606:2800:21f:cb07:6820:80da:af6b:8b2c"
EVERYTHING = ["0.0.0.0/0", "::/0"]


@contextlib.contextmanager
def refused(detail: str):
    """Expect an UnsafeURLError whose operator detail matches ``detail``; the customer's
    text never names a resolved address or a setting."""
    with pytest.raises(UnsafeURLError) as caught:
        yield caught
    assert re.search(detail, caught.value.operator_detail), caught.value.operator_detail
    assert "PGQUEUE" not in str(caught.value)


def logged_refusal(caplog) -> str:
    """The operator detail the transport logged for its refusal."""
    lines = [r.getMessage() for r in caplog.records if r.name == "django_pgqueue.webhooks"]
    assert lines, "no refusal logged"
    return lines[-1]


class FakeResolver:
    """Answers a fixed sequence of DNS responses; the last one repeats. Counts lookups."""

    def __init__(self, *answers):
        self.answers = [list(a) for a in answers]
        self.calls = 0

    def __call__(self, host, port):
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return answer


class Sentinel:
    """A TCP listener on 127.0.0.1 that counts the connections it accepts."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self):
        self.sock.close()


@pytest.fixture
def sentinel():
    listener = Sentinel()
    yield listener
    listener.close()


# ssrf.md §5.4: each must be refused. Hosts that need DNS ("localhost") resolve through the
# machine's resolver via /etc/hosts, never the network.
REFUSED_URLS = [
    "http://127.0.0.1/",
    "http://localhost/",
    "http://localhost./",
    "http://0/",
    "http://0.0.0.0/",
    "http://2130706433/",
    "http://0177.0.0.1/",
    "http://0x7f.1/",
    "http://127.1/",
    "http://10.1.2.3/",
    "http://172.31.255.255/",
    "http://192.168.0.1:8080/",
    "http://100.64.0.1/",
    "http://100.100.100.200/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::1]/",
    "http://[::]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[::127.0.0.1]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[2002:a9fe:a9fe::1]/",
    "http://[2001::1]/",
    # IPv4-translated (SIIT, RFC 2765/7915): loopback and the metadata address.
    "https://[::ffff:0:7f00:1]/",
    "https://[::ffff:0:127.0.0.1]/",
    "http://[::ffff:0:a9fe:a9fe]/",
    "http://[0:0:0:0:ffff:0:a9fe:a9fe]/",
    # ISATAP interface identifier carrying loopback, under a public-looking prefix.
    "http://[2606:4700::5efe:7f00:1]/",
    "http://[fd00:ec2::254]/",
    "http://[fe80::1%25eth0]/",
    "http://[ff02::1]/",
    "http://224.0.0.1/",
    "http://255.255.255.255/",
    "http://user:pw@example.test/",
    "ftp://example.test/file",
    "file:///etc/passwd",
    "gopher://example.test:70/_",
    "https://127.0.0.1./",
    "http://①②⑦.0.0.1/",
    "http://example.test\t/",
    "http://exa mple.test/",
    "http:///path-only",
    "http://example.test:0/",
    "http://example.test:99999/",
    "https://" + "a" * 2048 + ".test/",
    "javascript:alert(1)",
    "//example.test/",
]


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_url_vectors_refused(url):
    public = FakeResolver([PUBLIC_V4])
    resolver = public if "example.test" in url else None
    with pytest.raises(UnsafeURLError):
        validate_url(url, allow_http=True, resolver=resolver)


@pytest.mark.parametrize(
    "url",
    [
        "http://0/",
        "http://2130706433/",
        "http://0177.0.0.1/",
        "http://0x7f.1/",
        "http://127.1/",
        "http://0x7f000001/",
        "http://1.2.3/",
        "http://8.8.8.010/",
    ],
)
def test_non_canonical_ipv4_literals_refused_even_when_allowlisted(url):
    with refused("non-standard form"):
        validate_url(url, allow_http=True, allow_networks=EVERYTHING)


@pytest.mark.parametrize(
    "address",
    [
        "0.0.0.0",
        "0.1.2.3",
        "10.0.0.1",
        "172.16.0.1",
        "192.168.1.1",
        "100.64.0.1",
        "100.127.255.255",
        "100.100.100.200",
        "127.0.0.1",
        "127.255.255.254",
        "169.254.169.254",
        "192.0.0.8",
        "192.0.2.1",
        "198.51.100.1",
        "203.0.113.1",
        "192.88.99.1",
        "198.18.0.1",
        "198.19.255.255",
        "224.0.0.1",
        "239.255.255.250",
        "240.0.0.1",
        "255.255.255.255",
        "::",
        "::1",
        "::ffff:10.0.0.1",
        "::ffff:127.0.0.1",
        "::127.0.0.1",
        "::a9fe:a9fe",
        "64:ff9b::7f00:1",
        "64:ff9b::808:808",
        "64:ff9b:1::a9fe:a9fe",
        "2002:a9fe:a9fe::1",
        "2002:808:808::1",
        "2001::1",
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        "2001:db8::1",
        "3fff::1",
        "100::1",
        "5f00::1",
        "fc00::1",
        "fd12:3456::1",
        "fd00:ec2::254",
        "fe80::1",
        "febf::1",
        "ff02::1",
        "ff0e::1",
        "2001:20::1",
        "2001:2f::1",
        # IPv4-translated (SIIT): blocked whatever it carries, like NAT64.
        "::ffff:0:7f00:1",
        "::ffff:0:a9fe:a9fe",
        "::ffff:0:a00:1",
        "::ffff:0:808:808",
        # Local-use NAT64 with the IPv4 address after a /48, /56 or /64 prefix.
        "64:ff9b:1:7f00:0:100::",
        "64:ff9b:1:0:7f:0:1::",
        # ISATAP (RFC 5214): 0000:5efe or 0200:5efe, then an internal IPv4.
        "2606:4700::5efe:7f00:1",
        "2606:4700::200:5efe:a00:1",
        "2606:4700::300:5efe:c0a8:101",
        "2a00:1450::5efe:a9fe:a9fe",
        "::5efe:7f00:1",
    ],
)
def test_blocked_addresses(address):
    allowed, reason = is_address_allowed(address, [])
    assert not allowed
    assert reason


@pytest.mark.parametrize(
    "address",
    [
        "93.184.215.14",
        "8.8.8.8",
        "1.1.1.1",
        "::ffff:8.8.8.8",
        "2606:4700::6810:84e5",
        PUBLIC_V6,
        # An ISATAP identifier carrying a public IPv4 address is an ordinary host.
        "2606:4700::200:5efe:808:808",
    ],
)
def test_public_addresses_allowed(address):
    assert is_address_allowed(address, []) == (True, "")


@pytest.mark.parametrize(
    "address",
    [
        "169.254.169.254",
        "169.254.0.1",
        "fe80::1",
        "fe80::1%eth0",
        "fd00:ec2::254",
        "100.100.100.200",
        "::ffff:169.254.169.254",
        "::ffff:100.100.100.200",
        "::a9fe:a9fe",
        "64:ff9b::a9fe:a9fe",
        "64:ff9b:1::a9fe:a9fe",
        "2002:a9fe:a9fe::1",
        "2002:6464:64c8::1",
        # Teredo whose client (last 32 bits, inverted) is 169.254.169.254.
        "2001:0:4136:e378:8000:63bf:5601:5601",
        # Teredo whose server (bits 32-63) is 169.254.169.254.
        "2001:0:a9fe:a9fe::1",
        # IPv4-translated (SIIT).
        "::ffff:0:a9fe:a9fe",
        "::ffff:0:6464:64c8",
        # Local NAT64 with 169.254.169.254 after a /48 and after a /64 prefix.
        "64:ff9b:1:a9fe:a9:fe00::",
        "64:ff9b:1:0:a9:fea9:fe00:0",
        # ISATAP carrying the metadata address.
        "2606:4700::200:5efe:a9fe:a9fe",
        "2606:4700::5efe:6464:64c8",
    ],
)
def test_hard_deny_survives_allow_everything(address):
    allowed, reason = is_address_allowed(address, EVERYTHING)
    assert not allowed
    assert "never allowed" in reason


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/",
        "http://100.100.100.200/",
        "http://[::ffff:169.254.169.254]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[fe80::1%25eth0]/",
    ],
)
def test_hard_deny_urls_refused_even_when_allowlisted(url):
    with refused("never allowed"):
        validate_url(url, allow_http=True, allow_networks=EVERYTHING)


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("64:ff9b::808:808", True),
        ("64:ff9b::7f00:1", False),
        ("64:ff9b::a00:1", False),
        ("::ffff:0:808:808", True),
        ("::ffff:0:7f00:1", False),
        ("2002:808:808::1", True),
        ("2002:c0a8:101::1", False),
    ],
)
def test_allowlisted_ipv4_embedding_prefix_reaches_only_public_ipv4(address, allowed):
    # An IPv6-only network allow-lists its NAT64 (or SIIT, 6to4) prefix to reach public
    # receivers; that must not open the internal IPv4 addresses behind the translator.
    prefixes = ["64:ff9b::/96", "::ffff:0:0:0/96", "2002::/16"]
    verdict, reason = is_address_allowed(address, prefixes)
    assert verdict is allowed
    if not allowed:
        assert "carrying" in reason
    # Unless the IPv4 network is allow-listed too.
    assert is_address_allowed(address, [*prefixes, "127.0.0.0/8", "10.0.0.0/8", "192.168.0.0/16"])[
        0
    ]


def test_ipv4_translated_reason_names_the_embedded_address():
    allowed, reason = is_address_allowed("::ffff:0:7f00:1", [])
    assert not allowed
    assert "IPv4-translated" in reason and "127.0.0.1" in reason


def test_teredo_client_is_decoded_by_xor():
    # Client 127.0.0.1 is stored inverted: 0x7f000001 ^ 0xffffffff = 0x80fffffe.
    allowed, reason = is_address_allowed("2001:0:4136:e378:8000:63bf:80ff:fffe", [])
    assert not allowed
    assert "127.0.0.1" in reason


def test_loopback_allowed_only_with_allowlist():
    assert is_address_allowed("127.0.0.1", [])[0] is False
    assert is_address_allowed("127.0.0.1", ["127.0.0.0/8"]) == (True, "")
    assert is_address_allowed("::ffff:127.0.0.1", ["127.0.0.0/8"]) == (True, "")
    assert is_address_allowed("10.0.0.1", ["127.0.0.0/8"])[0] is False
    with pytest.raises(UnsafeURLError):
        validate_url("http://127.0.0.1:8000/hook", allow_http=True)
    validate_url("http://127.0.0.1:8000/hook", allow_http=True, allow_networks=["127.0.0.0/8"])


def test_allow_hosts_open_private_but_never_metadata():
    internal = FakeResolver(["10.0.0.5"])
    with refused("private network"):
        validate_url("https://hooks.internal.test/", allow_http=False, resolver=internal)
    validate_url(
        "https://Hooks.Internal.test./",
        allow_http=False,
        resolver=internal,
        allow_hosts=["hooks.internal.test"],
    )
    metadata = FakeResolver(["169.254.169.254"])
    with refused("never allowed"):
        validate_url(
            "https://hooks.internal.test/",
            allow_http=False,
            resolver=metadata,
            allow_hosts=["hooks.internal.test"],
        )
    with refused("private network"):
        validate_url(
            "https://other.internal.test/",
            allow_http=False,
            resolver=internal,
            allow_hosts=["hooks.internal.test"],
        )


def test_deny_addresses_win_over_allowlist():
    allowed, reason = is_address_allowed("10.0.0.5", ["10.0.0.0/8"], deny_addresses=["10.0.0.5"])
    assert not allowed
    assert "this server" in reason


def test_bad_allow_network_is_named():
    with pytest.raises(ValueError, match=r"'10\.0\.0\.0/33'"):
        is_address_allowed("8.8.8.8", ["10.0.0.0/33"])


def test_http_needs_opt_in_and_https_is_default():
    with refused("http://"):
        validate_url("http://example.test/", allow_http=False, resolver=FakeResolver([PUBLIC_V4]))
    validate_url("https://example.test/", allow_http=False, resolver=FakeResolver([PUBLIC_V4]))


def test_allowed_ports():
    resolver = FakeResolver([PUBLIC_V4])
    validate_url("https://example.test/", allow_http=False, allowed_ports=[443], resolver=resolver)
    with refused("port 8443"):
        validate_url(
            "https://example.test:8443/", allow_http=False, allowed_ports=[443], resolver=resolver
        )


def test_message_names_host_address_and_kind():
    resolver = FakeResolver(["10.0.0.5"])
    with pytest.raises(UnsafeURLError) as excinfo:
        validate_url("https://internal.example/hook", allow_http=False, resolver=resolver)
    assert (
        str(excinfo.value)
        == excinfo.value.public_message
        == (
            "The host 'internal.example' points to a private or reserved address, which cannot "
            "receive webhooks."
        )
    )
    assert excinfo.value.operator_detail == (
        "The host 'internal.example' resolves to 10.0.0.5, a private network address; "
        "webhooks cannot be sent to private, loopback, link-local or metadata addresses, "
        "unless its network is in PGQUEUE['WEBHOOKS']['ALLOW_NETWORKS'] or "
        "'internal.example' is in PGQUEUE['WEBHOOKS']['ALLOW_HOSTS']."
    )


@pytest.mark.parametrize(
    ("url", "kwargs", "setting"),
    [
        ("http://hooks.example.test/", {}, "PGQUEUE['WEBHOOKS']['ALLOW_HTTP'] = True"),
        ("https://127.0.0.1/", {}, "PGQUEUE['WEBHOOKS']['ALLOW_NETWORKS']"),
        ("https://[::1]/", {}, "PGQUEUE['WEBHOOKS']['ALLOW_NETWORKS']"),
        ("https://hooks.example.test:8443/", {"allowed_ports": [443]}, "['ALLOWED_PORTS']"),
    ],
)
def test_every_refusal_a_setting_could_allow_names_that_setting(url, kwargs, setting):
    resolver = FakeResolver([PUBLIC_V4])
    with pytest.raises(UnsafeURLError) as excinfo:
        validate_url(url, allow_http=False, resolver=resolver, **kwargs)
    assert setting in excinfo.value.operator_detail
    assert "PGQUEUE" not in str(excinfo.value)


def test_a_refusal_no_setting_can_lift_names_none():
    with pytest.raises(UnsafeURLError) as excinfo:
        validate_url(
            "https://169.254.169.254/", allow_http=False, allow_networks=["169.254.0.0/16"]
        )
    assert "never allowed" in excinfo.value.operator_detail
    assert "PGQUEUE" not in excinfo.value.operator_detail


def test_public_host_passes_with_stub_resolver():
    resolver = FakeResolver([PUBLIC_V4, PUBLIC_V6])
    validate_url("https://hooks.example.test/in", allow_http=False, resolver=resolver)
    assert check_host("hooks.example.test", 443, resolver=resolver) == [
        ipaddress.ip_address(PUBLIC_V4),
        ipaddress.ip_address(PUBLIC_V6),
    ]


@pytest.mark.parametrize(
    "answer",
    [[PUBLIC_V4, "127.0.0.1"], ["127.0.0.1", PUBLIC_V4], [PUBLIC_V6, "::ffff:10.0.0.1"]],
)
def test_mixed_answers_refused(answer):
    with refused("resolves to"):
        validate_url("https://mixed.example.test/", allow_http=False, resolver=FakeResolver(answer))


def test_idna_host_is_encoded_before_resolving():
    seen = []

    def resolver(host, port):
        seen.append(host)
        return [PUBLIC_V4]

    validate_url("https://bücher.example/", allow_http=False, resolver=resolver)
    assert seen == ["xn--bcher-kva.example"]


def test_unresolvable_host_is_reported():
    def resolver(host, port):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    with refused("could not be resolved"):
        validate_url("https://nowhere.example.test/", allow_http=False, resolver=resolver)


def test_validate_without_resolving_checks_shape_only():
    validate_url("https://internal.example/", allow_http=False, resolve=False)
    with pytest.raises(UnsafeURLError):
        validate_url("https://10.0.0.1/", allow_http=False, resolve=False)


def test_resolve_host_literal_skips_the_resolver():
    resolver = FakeResolver(["10.0.0.1"])
    assert resolve_host("8.8.8.8", 443, resolver) == [ipaddress.ip_address("8.8.8.8")]
    assert resolver.calls == 0
    assert resolve_host("x.test", 443, FakeResolver(["8.8.8.8", "8.8.8.8"])) == [
        ipaddress.ip_address("8.8.8.8")
    ]


def test_mixed_answer_never_connects(sentinel, caplog):
    resolver = FakeResolver([PUBLIC_V4, "127.0.0.1"])
    with WebhookTransport(allow_http=True, resolver=resolver, deny_addresses=()) as transport:
        result = transport.post(f"http://mixed.example.test:{sentinel.port}/", b"{}", {})
    assert result.status_code is None
    assert result.error == (
        "refused: The host 'mixed.example.test' points to a private or reserved address, "
        "which cannot receive webhooks."
    )
    assert "The host 'mixed.example.test' resolves to 127.0.0.1" in logged_refusal(caplog)
    assert sentinel.connections == 0


def test_dns_rebinding_refused_at_connect_time(sentinel, caplog):
    # Save time sees a public address; send time sees loopback. The connect-time check is
    # the one that counts, and nothing reaches the sentinel listening on 127.0.0.1.
    resolver = FakeResolver([PUBLIC_V4], ["127.0.0.1"])
    url = f"http://rebind.example.test:{sentinel.port}/hook"
    validate_url(url, allow_http=True, resolver=resolver)
    with WebhookTransport(allow_http=True, resolver=resolver, deny_addresses=()) as transport:
        result = transport.post(url, b"{}", {})
    assert resolver.calls == 2
    assert result.error.startswith("refused:")
    assert "127.0.0.1" not in result.error  # the customer never learns the address
    assert "127.0.0.1" in logged_refusal(caplog)
    assert sentinel.connections == 0


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/",
        "http://[::ffff:169.254.169.254]/",
        "http://[::ffff:0:a9fe:a9fe]/",
        "http://[2606:4700::200:5efe:a9fe:a9fe]/",
    ],
)
def test_transport_refuses_hard_deny_even_when_allowlisted(url, caplog):
    with WebhookTransport(allow_http=True, allow_networks=EVERYTHING, deny_addresses=()) as t:
        result = t.post(url, b"{}", {})
    assert result.status_code is None
    assert result.error.startswith("refused:") and "private or reserved" in result.error
    assert "never allowed" in logged_refusal(caplog)


@pytest.mark.parametrize("url", ["https://[::ffff:0:7f00:1]/", "http://[::ffff:0:a9fe:a9fe]/"])
def test_transport_refuses_ipv4_translated_without_allowlist(url, caplog):
    with WebhookTransport(allow_http=True, deny_addresses=()) as transport:
        result = transport.post(url, b"{}", {})
    assert result.status_code is None
    assert result.error.startswith("refused:")
    assert "IPv4-translated" in logged_refusal(caplog)
