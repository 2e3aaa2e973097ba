"""The HTTP sender of webhooks: one POST, bounded in every dimension, never raising.

Built on ``requests``' HTTP adapter with pinning: the host is resolved once per request, every
address is checked (:func:`django_pgqueue.webhooks.ssrf.check_host`), and the connection pool
is keyed and built with the checked IP, while the ``Host`` header, TLS SNI and certificate
check use the original name. urllib3 therefore never looks the name up again, so a DNS
answer that changes between the check and the connect (rebinding) cannot reach a blocked
address. ``docs/webhooks-security.md`` explains why this is not delegated to a library.

Stale keep-alive connections: a receiver may close an idle kept-alive connection at any
moment without saying so (no ``Connection: close``), and a POST written into it just as
it goes fails before any answer. When a connection taken from the pool fails before a
single byte of the response arrived, the POST is sent once more at once, on a fresh
connection, within the same attempt and deadline, and the result carries a ``note``
saying so. Never after a response byte arrived (the receiver answered something), never
after a timeout (the receiver may be working on it), never for a fresh connection.

Budgets: a connect timeout, and a total deadline enforced by a watchdog thread that shuts
the socket down when the deadline passes. requests' read timeout applies to each socket read,
so a receiver sending one byte every 200 ms would otherwise hold a worker for ever. The body
is streamed and at most ``response_cap`` bytes are read; the rest is never drained.

Requests go straight to the adapter, not through a ``requests.Session``: a session merges
its settings, environment, cookies and hooks into every request, which cost about a third
of a delivery's CPU time and brought nothing a webhook wants (proxies, netrc and cookies
are exactly what must not apply).
"""

from __future__ import annotations

import email.utils
import http.client
import io
import itertools
import math
import re
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from requests.utils import check_header_validity
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from django_pgqueue.webhooks.brokers.urls import is_broker_url
from django_pgqueue.webhooks.deadlines import _Deadline, _watchdog
from django_pgqueue.webhooks.signing import USER_AGENT
from django_pgqueue.webhooks.ssrf import (
    IPAddress,
    IPNetwork,
    Resolver,
    UnsafeURLError,
    check_host,
    log_refusal,
    own_host_addresses,
    parse_networks,
    validate_url,
)
from django_pgqueue.webhooks.transport_result import NOTE_PREFIX, TransportResult

__all__ = [
    "MAX_RETRY_AFTER_SECONDS",
    "NOTE_PREFIX",
    "TransportResult",
    "WebhookTransport",
    "parse_retry_after",
]

# What we keep of response headers: enough to debug a receiver, bounded so one hostile
# response cannot bloat the attempt log.
MAX_RESPONSE_HEADERS = 50
MAX_RESPONSE_HEADER_VALUE = 1024
_READ_CHUNK = 64 * 1024
# The deadline of the request running in this thread, so the connection objects urllib3
# creates deep inside requests can register themselves with it.
_current = threading.local()


def _attach_current(conn: HTTPConnection) -> None:
    deadline = getattr(_current, "deadline", None)
    if deadline is not None:
        deadline.attach(conn)


class _CountingReader(io.RawIOBase):
    """The socket reader of a response, counting into the deadline the bytes it reads."""

    def __init__(self, raw: io.RawIOBase, deadline: _Deadline) -> None:
        super().__init__()
        self._raw = raw
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        n = self._raw.readinto(buffer)
        if n:
            self._deadline.received += n
        return n

    def fileno(self) -> int:
        return self._raw.fileno()

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


class _CountedResponse(http.client.HTTPResponse):
    """http.client's response, reading through a :class:`_CountingReader`.

    Counting at the socket level is the only sure way to know that no byte arrived: a
    reset in the middle of the status line loses the bytes already read in its exception.
    Only kept-alive connections need it (a fresh one is never resent).
    """

    def __init__(self, sock: Any, debuglevel: int = 0, method: str | None = None, url: Any = None):
        super().__init__(sock, debuglevel, method, url)
        deadline = getattr(_current, "deadline", None)
        if deadline is not None and deadline.reused:
            # Nothing was read yet, so the buffer is empty and detaching loses nothing.
            self.fp = io.BufferedReader(_CountingReader(self.fp.detach(), deadline))


def _take(conn: Any) -> Any:
    """Note whether the pool handed out a kept-alive connection; for the resend, close it."""
    deadline = getattr(_current, "deadline", None)
    if deadline is not None:
        if deadline.fresh_only and conn.sock is not None:
            conn.close()  # urllib3 connects a closed connection again before using it
        deadline.reused = conn.sock is not None
    return conn


class _WatchedHTTPConnection(HTTPConnection):
    response_class = _CountedResponse

    def connect(self) -> None:
        _attach_current(self)
        super().connect()

    def request(self, *args: Any, **kwargs: Any) -> None:
        # A kept-alive connection skips connect(): register on every request too.
        _attach_current(self)
        super().request(*args, **kwargs)


class _WatchedHTTPSConnection(HTTPSConnection):
    response_class = _CountedResponse

    def connect(self) -> None:
        _attach_current(self)
        super().connect()

    def request(self, *args: Any, **kwargs: Any) -> None:
        _attach_current(self)
        super().request(*args, **kwargs)


class _WatchedHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection

    def _get_conn(self, timeout: float | None = None) -> Any:
        return _take(super()._get_conn(timeout))


class _WatchedHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection

    def _get_conn(self, timeout: float | None = None) -> Any:
        return _take(super()._get_conn(timeout))


class _RefusedDestination(Exception):
    """The connect-time address check refused the destination.

    Not a ValueError on purpose: requests wraps ValueErrors raised while choosing a
    connection into ``InvalidURL``, which would hide the refusal among URL errors.
    """


class _PinningAdapter(HTTPAdapter):
    """An adapter that resolves once, checks every address, and connects to the checked IP."""

    def __init__(
        self,
        *,
        allow_networks: tuple[IPNetwork, ...],
        allow_hosts: tuple[str, ...],
        resolver: Resolver | None,
        deny_addresses: tuple[IPAddress, ...],
    ) -> None:
        self._allow_networks = allow_networks
        self._allow_hosts = allow_hosts
        self._resolver = resolver
        self._deny_addresses = deny_addresses
        # No retries at all: a retry re-sends the POST, and the queue owns retry policy.
        super().__init__(max_retries=0)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {
            "http": _WatchedHTTPConnectionPool,
            "https": _WatchedHTTPSConnectionPool,
        }

    # Never a proxy, whatever ``proxies`` says (a proxy would resolve the name itself):
    # the pool is always the pinned one, and the request line is the path. Also spares
    # two URL parses per request that only looked for a proxy.
    def get_connection_with_tls_context(
        self,
        request: requests.PreparedRequest,
        verify: bool | str | None,
        proxies: Mapping[str, str] | None = None,
        cert: str | tuple[str, str] | None = None,
    ) -> HTTPConnectionPool:
        try:
            host_params, pool_kwargs = self.build_connection_pool_key_attributes(
                request,
                verify,  # type: ignore[arg-type]
                cert,
            )
        except ValueError as exc:
            raise requests.exceptions.InvalidURL(exc, request=request) from None
        pool: HTTPConnectionPool = self.poolmanager.connection_from_host(
            **host_params, pool_kwargs=pool_kwargs
        )
        return pool

    def request_url(self, request: requests.PreparedRequest, proxies: dict[str, str] | None) -> str:
        return request.path_url

    def build_connection_pool_key_attributes(
        self,
        request: requests.PreparedRequest,
        verify: bool | str,
        cert: str | tuple[str, str] | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(
            request, verify, cert
        )
        host: str = host_params["host"] or ""
        scheme: str = host_params["scheme"]
        port: int | None = host_params["port"]
        effective_port = port if port is not None else (443 if scheme == "https" else 80)
        # The only check that counts: on the name urllib3 is about to use, right before the
        # connection is chosen. post() reports the refusal as "refused: ...".
        try:
            addresses = check_host(
                host,
                effective_port,
                allow_networks=self._allow_networks,
                allow_hosts=self._allow_hosts,
                resolver=self._resolver,
                deny_addresses=self._deny_addresses,
            )
        except UnsafeURLError as exc:
            log_refusal(request.url or host, exc, where="send time")
            raise _RefusedDestination(str(exc)) from None
        # getaddrinfo returns addresses in RFC 6724 order (unreachable families last), so
        # the first is the one a plain connect would have tried first.
        pinned = addresses[0]
        deadline = getattr(_current, "deadline", None)
        if deadline is not None:
            deadline.address = str(pinned)

        # WebhookTransport.post() built these headers for this request alone.
        host_header = f"[{host}]" if ":" in host else host
        if port is not None:
            host_header += f":{port}"
        request.headers["Host"] = host_header
        if scheme == "https":
            # Certificate and SNI for the name, not the IP we connect to.
            pool_kwargs["server_hostname"] = host
            pool_kwargs["assert_hostname"] = host
        host_params["host"] = f"[{pinned}]" if pinned.version == 6 else str(pinned)
        return host_params, pool_kwargs


def _connection_refused(exc: BaseException) -> bool:
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError):
            return True
        stack.extend([current.__cause__, current.__context__, getattr(current, "reason", None)])
        stack.extend(arg for arg in current.args if isinstance(arg, BaseException))
    return "Connection refused" in str(exc)


_CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _visible(text: str) -> str:
    """``text`` with control characters written as visible ``\\xNN`` escapes.

    What a receiver sends is stored in the attempt log: PostgreSQL text and jsonb refuse
    NUL, and other control characters only hide things from whoever reads the log.
    """
    if text.isprintable():  # nearly always: skip the regex
        return text
    return _CONTROL_CHARACTERS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _short(exc: BaseException, limit: int = 300) -> str:
    text = _visible(f"{type(exc).__name__}: {exc}")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _trim_headers(headers: Mapping[str, str]) -> dict[str, str]:
    trimmed: dict[str, str] = {}
    for name, value in itertools.islice(headers.items(), MAX_RESPONSE_HEADERS):
        key = _visible(str(name)[:MAX_RESPONSE_HEADER_VALUE])
        trimmed[key] = _visible(str(value)[:MAX_RESPONSE_HEADER_VALUE])
    return trimmed


def _stale_connection(exc: Exception, deadline: _Deadline) -> bool:
    """Did a kept-alive connection fail before any byte of the response arrived?

    requests' ConnectionError covers the receiver closing or resetting the connection
    (and TLS failing on it); timeouts are not among them: a receiver that is slow to
    answer may be processing the POST, so it is never sent again.
    """
    return (
        deadline.reused
        and deadline.received == 0
        and not deadline.fired
        and isinstance(exc, requests.exceptions.ConnectionError)
        and not isinstance(exc, requests.exceptions.ConnectTimeout)
    )


class WebhookTransport:
    """Sends webhook POSTs with SSRF protection, no redirects, no proxies and strict budgets.

    One connection pool per transport, so connections are kept alive between POSTs to the
    same receiver. A transport is not meant to be shared between threads: keep one per
    worker thread.
    """

    def __init__(
        self,
        *,
        connect_timeout: float = 5.0,
        total_timeout: float = 30.0,
        response_cap: int = 20_000,
        allow_http: bool = False,
        allow_networks: Iterable[str | IPNetwork] = (),
        allow_hosts: Iterable[str] = (),
        allowed_ports: Iterable[int] | None = None,
        resolver: Resolver | None = None,
        deny_addresses: Iterable[str | IPAddress] | None = None,
        verify: bool | str = True,
    ) -> None:
        """Configure the budgets and the SSRF policy.

        ``allow_networks`` (CIDRs) and ``allow_hosts`` (names allowed to resolve to private
        addresses) open the block-list for internal receivers, never the metadata addresses.
        ``deny_addresses`` are refused even when allow-listed; by default, the addresses of
        this machine's host name. ``verify`` is requests' TLS verification setting (a CA
        bundle path for a private CA).
        """
        for name, value in (("connect_timeout", connect_timeout), ("total_timeout", total_timeout)):
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if isinstance(response_cap, bool) or not isinstance(response_cap, int) or response_cap < 0:
            raise ValueError(f"response_cap must be a non-negative int, got {response_cap!r}")
        self.connect_timeout = float(connect_timeout)
        self.total_timeout = float(total_timeout)
        self.response_cap = response_cap
        self.allow_http = allow_http
        self.allow_networks = parse_networks(allow_networks)
        if isinstance(allow_hosts, str):
            raise ValueError(f"allow_hosts must be a list of host names, not {allow_hosts!r}")
        self.allow_hosts = tuple(allow_hosts)
        self.allowed_ports = None if allowed_ports is None else frozenset(allowed_ports)
        self.resolver = resolver
        if deny_addresses is None:
            self.deny_addresses: tuple[IPAddress, ...] = own_host_addresses()
        else:
            self.deny_addresses = tuple(
                a if not isinstance(a, str) else _parse_address(a) for a in deny_addresses
            )
        self.verify = verify

        # The adapter is used without a requests.Session, so HTTP(S)_PROXY, NO_PROXY, netrc,
        # REQUESTS_CA_BUNDLE and cookies never apply: a proxy would resolve the name itself
        # and bypass the address check; netrc would leak credentials.
        self.adapter = _PinningAdapter(
            allow_networks=self.allow_networks,
            allow_hosts=self.allow_hosts,
            resolver=resolver,
            deny_addresses=self.deny_addresses,
        )
        # URLs that passed the shape check, prepared the way requests prepares them. Both
        # are pure functions of the URL and this transport's settings; the address check
        # is not cached (it runs in the adapter, on every request).
        self._checked_urls: dict[str, str] = {}
        self._brokers: Any = None  # webhooks.brokers.BrokerPublisher, made on first use

    def close(self) -> None:
        """Close pooled connections."""
        self.adapter.close()
        if self._brokers is not None:
            self._brokers.close()

    def __enter__(self) -> WebhookTransport:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> TransportResult:
        """POST ``body`` to ``url`` and return what happened; never raises for network trouble.

        An ``amqp://`` or ``nats://`` URL is a broker destination: the same body and
        headers are published there instead (``webhooks/brokers``).
        """
        if is_broker_url(url):
            if self._brokers is None:
                from .brokers.publisher import BrokerPublisher

                self._brokers = BrokerPublisher(self)
            return self._brokers.publish(url, body, headers)
        started = time.monotonic()
        result = TransportResult()
        prepared_url = self._checked_urls.get(url)
        if prepared_url is None:
            try:
                validate_url(
                    url,
                    allow_http=self.allow_http,
                    allow_networks=self.allow_networks,
                    allowed_ports=self.allowed_ports,
                    resolve=False,
                )
            except UnsafeURLError as exc:
                log_refusal(url, exc, where="send time")
                result.error = f"refused: {exc}"
                return result

        # Whatever the caller passed, never accept a compressed body (decompression bombs).
        send_headers: CaseInsensitiveDict[str | bytes] = CaseInsensitiveDict(headers)
        send_headers["Accept-Encoding"] = "identity"
        if "User-Agent" not in send_headers:
            send_headers["User-Agent"] = USER_AGENT
        send_headers["Content-Length"] = str(len(body))

        deadline = _Deadline(self.total_timeout)
        _current.deadline = deadline
        _watchdog.watch(deadline)
        response: requests.Response | None = None
        try:
            if prepared_url is None:
                prepared_url = self._prepare_url(url)
            request = requests.PreparedRequest()
            request.method = "POST"
            request.url = prepared_url
            for item in send_headers.items():
                check_header_validity(item)  # no CR/LF injection, whoever the caller is
            request.headers = send_headers
            request.body = body
            try:
                response = self._send(request)
            except requests.exceptions.ConnectionError as exc:
                if not _stale_connection(exc, deadline):
                    raise
                result.note = (
                    f"the kept-alive connection failed before any response ({_short(exc, 160)}); "
                    "sent again on a fresh connection"
                )
                deadline.resend_fresh()
                response = self._send(request)
            result.status_code = response.status_code
            result.headers = _trim_headers(response.headers)
            result.body, result.truncated = self._read_capped(response)
            if response.is_redirect or 300 <= response.status_code < 400:
                result.error = f"redirect {response.status_code} not followed"
        except _RefusedDestination as exc:
            result.error = f"refused: {exc}"
        except Exception as exc:  # the contract is "never raises" for network trouble
            result.error = self._describe(exc, deadline)
        finally:
            deadline.finish()
            _watchdog.unwatch(deadline)
            _current.deadline = None
            if response is not None:
                response.close()
        if not (result.error or "").startswith("refused"):
            # As sent: the adapter added Host to these very headers.
            result.request_headers = {str(k): str(v) for k, v in send_headers.items()}
        if deadline.fired and (result.error is None or not result.error.startswith("refused")):
            # Whatever exception the cut socket produced, the cause is the deadline.
            result.error = f"total deadline of {self.total_timeout:g} s exceeded"
        result.address = deadline.address
        result.duration_ms = int((time.monotonic() - started) * 1000)
        return result

    def _send(self, request: requests.PreparedRequest) -> requests.Response:
        return self.adapter.send(
            request,
            stream=True,
            # The read timeout bounds a single silent read; the watchdog bounds the total.
            timeout=(self.connect_timeout, self.total_timeout),
            verify=self.verify,
            proxies={},
        )

    def _prepare_url(self, url: str) -> str:
        """``url`` as requests sends it (IDNA host, re-quoted path); cached once checked."""
        request = requests.PreparedRequest()
        request.prepare_url(url, None)
        prepared: str = request.url  # type: ignore[assignment]
        if len(self._checked_urls) >= 1024:
            self._checked_urls.clear()
        self._checked_urls[url] = prepared
        return prepared

    def _read_capped(self, response: requests.Response) -> tuple[bytes, bool]:
        raw = response.raw
        cap = self.response_cap
        chunks: list[bytes] = []
        size = 0
        # Read one byte past the cap to know whether there was more, then stop: the rest is
        # never read (closing the response closes the connection instead of draining it).
        while size <= cap:
            chunk = raw.read(min(_READ_CHUNK, cap + 1 - size), decode_content=False)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        body = b"".join(chunks)
        if size > cap:
            raw.close()
            return body[:cap], True
        # Fully read: hand the connection back to the pool for keep-alive.
        raw.release_conn()
        return body, False

    def _describe(self, exc: BaseException, deadline: _Deadline) -> str:
        if deadline.fired:
            return f"total deadline of {self.total_timeout:g} s exceeded"
        if isinstance(exc, requests.exceptions.ConnectTimeout):
            return f"connect timeout ({self.connect_timeout:g} s)"
        if isinstance(exc, requests.exceptions.ReadTimeout):
            return f"read timeout ({self.total_timeout:g} s without data)"
        if isinstance(exc, requests.exceptions.SSLError):
            return f"TLS error: {_short(exc)}"
        if isinstance(exc, requests.exceptions.ConnectionError) and _connection_refused(exc):
            return "connection refused"
        if isinstance(exc, requests.exceptions.RequestException):
            return f"connection error: {_short(exc)}"
        return f"unexpected error: {_short(exc)}"


def _parse_address(value: str) -> IPAddress:
    import ipaddress

    try:
        return ipaddress.ip_address(value.strip("[]"))
    except ValueError:
        raise ValueError(f"{value!r} in deny_addresses is not an IP address") from None


#: The longest delay a ``Retry-After`` header can ask for, whatever it says: one year.
#: ``RETRY_AFTER_CAP`` bounds the delay the queue honours much further; this cap keeps
#: the parsing itself total, so a header of a thousand digits or a date in the year 9999
#: is still a finite number of seconds instead of an ``OverflowError``.
MAX_RETRY_AFTER_SECONDS = 366 * 24 * 3600.0
# More significant digits than this is more than the cap, whatever the digits.
_MAX_RETRY_AFTER_DIGITS = len(str(int(MAX_RETRY_AFTER_SECONDS)))


def parse_retry_after(value: object, now: datetime | None = None) -> float | None:
    """Return the delay a ``Retry-After`` header asks for, in seconds, or ``None``.

    Accepts delta-seconds (``"120"``) and HTTP-dates (``"Wed, 21 Oct 2015 07:28:00 GMT"``,
    measured from ``now``, default the current UTC time; a date in the past gives 0).
    Anything else, including negative numbers, gives ``None``: a garbage header should fall
    back to the normal retry policy, not break it.

    Total: whatever a receiver sends (hundreds of digits, a date in the year 9999, control
    characters, not even a string), the answer is ``None`` or a number of seconds between
    0 and :data:`MAX_RETRY_AFTER_SECONDS`; it never raises.
    """
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    if text.isascii() and text.isdigit():
        # Never int() the whole string: past 4,300 digits int() raises ValueError, and
        # float() of a few hundred digits raises OverflowError.
        significant = text.lstrip("0") or "0"
        if len(significant) > _MAX_RETRY_AFTER_DIGITS:
            return MAX_RETRY_AFTER_SECONDS
        return min(float(int(significant)), MAX_RETRY_AFTER_SECONDS)
    try:
        when = email.utils.parsedate_to_datetime(text)
        if when.tzinfo is None:
            # HTTP-dates are always GMT; a zone-less parse means the sender wrote "-0000".
            when = when.replace(tzinfo=UTC)
        current = now or datetime.now(UTC)
        if current.tzinfo is None:
            current = current.replace(tzinfo=UTC)
        delay = (when - current).total_seconds()
    except (TypeError, ValueError, IndexError, OverflowError):
        # parsedate_to_datetime raises ValueError for what it cannot read, and the
        # datetime it builds raises ValueError or OverflowError for an impossible date.
        return None
    return min(max(0.0, delay), MAX_RETRY_AFTER_SECONDS)
