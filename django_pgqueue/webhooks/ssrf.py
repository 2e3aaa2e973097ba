"""SSRF guard for webhook URLs: URL shape checks and destination-address classification.

Two entry points:

* :func:`validate_url` checks a URL when an endpoint is saved (shape, then every resolved
  address) so the user gets a clear error early;
* :func:`check_host` resolves a host and checks *every* address; the transport calls it at
  connect time and connects to an address it returned, which is the check that counts (a DNS
  answer can change between save time and send time).

Classification (:func:`is_address_allowed`): unwrap IPv4 carried inside IPv6 (IPv4-mapped,
IPv4-translated/SIIT, IPv4-compatible, NAT64, 6to4, Teredo, ISATAP), then allow only
``is_global`` non-multicast addresses outside an explicit block-list. The explicit list is
needed because the stdlib flags differ between Python versions and miss the embedded forms.
An allow-list of CIDRs can open private ranges for internal deployments and tests, except
the hard-deny set (link-local, cloud metadata and host-agent addresses, and metadata host
names), which nothing opens.

A refusal (:class:`UnsafeURLError`) carries two texts: a generic one for the customer who
typed the URL, and the operator's detail (the resolved address, the reason, the setting),
which :func:`log_refusal` logs and the admin shows.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from urllib.parse import SplitResult, urlsplit

__all__ = [
    "BLOCKED_NETWORKS",
    "HARD_DENY_HOSTS",
    "HARD_DENY_NETWORKS",
    "IPAddress",
    "Resolver",
    "UnsafeURLError",
    "check_host",
    "is_address_allowed",
    "log_refusal",
    "own_host_addresses",
    "parse_networks",
    "resolve_host",
    "validate_url",
]

logger = logging.getLogger("django_pgqueue.webhooks")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# A resolver takes (host, port) and returns the addresses the host resolves to.
Resolver = Callable[[str, int], Iterable[str | IPAddress]]

MAX_URL_LENGTH = 2048

_POLICY_SENTENCE = "webhooks cannot be sent to private, loopback, link-local or metadata addresses"


def _allow_hint(reason: str, host: str = "") -> str:
    """The setting that would allow a refused address, when one would."""
    if "never allowed" in reason:
        return ""
    hint = ", unless its network is in PGQUEUE['WEBHOOKS']['ALLOW_NETWORKS']"
    if host and not _is_literal(host):
        hint += f" or {host!r} is in PGQUEUE['WEBHOOKS']['ALLOW_HOSTS']"
    return hint


class UnsafeURLError(ValueError):
    """A webhook URL or the address it resolves to is not allowed.

    Two texts, for two readers. ``public_message`` (also ``str()``) is for the
    customer who typed the URL (portal form, HTTP API, the attempt log they can read):
    it names the URL or host they gave and the kind of refusal, never an address the
    host resolved to nor the operator's settings, which would map the internal network
    and the allow-list for whoever probes with URLs. ``operator_detail`` says what the
    host resolved to, why that address is refused and which ``PGQUEUE`` setting would
    allow it: for the admin and the logs.
    """

    def __init__(self, public_message: str, operator_detail: str | None = None) -> None:
        super().__init__(public_message)
        self.public_message = public_message
        self.operator_detail = operator_detail or public_message

    def __str__(self) -> str:
        return self.public_message


def _refused_address(host: str, operator_detail: str) -> UnsafeURLError:
    """An address refusal. The customer's text is the same whatever the address was
    (private, loopback, metadata...): it names only the host they gave."""
    if _is_literal(host):
        public = f"The address {host} is a private or reserved address"
    else:
        public = f"The host {host!r} points to a private or reserved address"
    return UnsafeURLError(f"{public}, which cannot receive webhooks.", operator_detail)


def log_refusal(url: str, error: UnsafeURLError, *, where: str) -> None:
    """Log a refusal with its operator detail (the stored text is the customer's).

    ``where`` says which check refused: "send time" (the worker) or "save time".
    """
    logger.warning("Webhook URL %s refused at %s: %s", url, where, error.operator_detail)


def _net(cidr: str) -> IPNetwork:
    return ipaddress.ip_network(cidr)


# Never allowed, whatever the allow-list says: cloud metadata endpoints answer credentials,
# host agents answer host configuration, and no legitimate webhook receiver lives on a
# link-local address. Each is also in BLOCKED_NETWORKS (the reason a refusal gives).
_HARD_DENY: tuple[tuple[IPNetwork, str], ...] = (
    (_net("169.254.0.0/16"), "a link-local address (cloud metadata lives here)"),
    (_net("169.254.169.254/32"), "the cloud metadata address"),
    (_net("fe80::/10"), "a link-local address"),
    # AWS's IPv6 instance services: metadata ::254, DNS ::253, time ::123.
    (_net("fd00:ec2::/64"), "an AWS instance services address (metadata, DNS, time)"),
    (_net("fd00:ec2::254/128"), "the AWS metadata address"),
    (_net("fd20:ce::254/128"), "the GCP metadata address (IPv6)"),
    (_net("100.100.100.200/32"), "a cloud metadata address (Alibaba)"),
    # A public address, so nothing else here would refuse it.
    (_net("168.63.129.16/32"), "the Azure host agent address (WireServer)"),
    (_net("192.0.0.192/32"), "a cloud metadata address (Oracle)"),
)
HARD_DENY_NETWORKS: tuple[IPNetwork, ...] = tuple(network for network, _ in _HARD_DENY)

#: Host names of metadata services, refused by name whatever they resolve to (a
#: split-horizon DNS may answer anything) and whatever the allow-lists say.
HARD_DENY_HOSTS = frozenset(
    {
        "metadata.google.internal",
        "metadata.goog",
        "metadata",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.tencentyun.com",
        "metadata.platformequinix.com",
    }
)

# Deny if the address (after unwrapping IPv4-mapped) falls in any of these. Longest prefix
# first, so the reason names the most specific block (e.g. metadata before CGNAT).
BLOCKED_NETWORKS: tuple[tuple[IPNetwork, str], ...] = tuple(
    sorted(
        (
            (_net("0.0.0.0/8"), "a 'this network' address (reaches the local host)"),
            (_net("10.0.0.0/8"), "a private network address"),
            (_net("172.16.0.0/12"), "a private network address"),
            (_net("192.168.0.0/16"), "a private network address"),
            (_net("100.64.0.0/10"), "a shared (carrier-grade NAT) address"),
            (_net("127.0.0.0/8"), "a loopback address"),
            (_net("192.0.0.0/24"), "an IETF protocol assignment address"),
            (_net("192.0.2.0/24"), "a documentation address"),
            (_net("198.51.100.0/24"), "a documentation address"),
            (_net("203.0.113.0/24"), "a documentation address"),
            (_net("192.88.99.0/24"), "a 6to4 relay anycast address"),
            (_net("198.18.0.0/15"), "a benchmarking address"),
            (_net("224.0.0.0/4"), "a multicast address"),
            (_net("240.0.0.0/4"), "a reserved address"),
            (_net("255.255.255.255/32"), "the broadcast address"),
            (_net("::/128"), "the unspecified address"),
            (_net("::1/128"), "a loopback address"),
            (_net("::/96"), "an IPv4-compatible IPv6 address"),
            (_net("::ffff:0:0:0/96"), "an IPv4-translated (SIIT) address"),
            (_net("64:ff9b::/96"), "a NAT64 address"),
            (_net("64:ff9b:1::/48"), "a local NAT64 address"),
            (_net("2002::/16"), "a 6to4 address"),
            (_net("2001::/32"), "a Teredo address"),
            (_net("2001:db8::/32"), "a documentation address"),
            (_net("3fff::/20"), "a documentation address"),
            (_net("100::/64"), "a discard-only address"),
            (_net("5f00::/16"), "an SRv6 segment identifier"),
            (_net("fc00::/7"), "a unique local (private) address"),
            (_net("ff00::/8"), "a multicast address"),
            (_net("2001:20::/28"), "an ORCHIDv2 address"),
            *_HARD_DENY,
        ),
        key=lambda item: (item[0].version, -item[0].prefixlen),
    )
)

_MAPPED = _net("::ffff:0:0/96")
_TRANSLATED = _net("::ffff:0:0:0/96")
_COMPATIBLE = _net("::/96")
_NAT64 = _net("64:ff9b::/96")
_NAT64_LOCAL = _net("64:ff9b:1::/48")
_SIX_TO_FOUR = _net("2002::/16")
_TEREDO = _net("2001::/32")


def parse_networks(networks: Iterable[str | IPNetwork]) -> tuple[IPNetwork, ...]:
    """Parse CIDR strings (or network objects) into networks, with an error naming a bad one."""
    if isinstance(networks, str):
        raise ValueError(f"allow_networks must be a list of CIDRs, not the string {networks!r}")
    parsed: list[IPNetwork] = []
    for entry in networks:
        if isinstance(entry, ipaddress.IPv4Network | ipaddress.IPv6Network):
            parsed.append(entry)
            continue
        try:
            parsed.append(ipaddress.ip_network(str(entry).strip(), strict=False))
        except ValueError:
            raise ValueError(
                f"{entry!r} in allow_networks is not a network; use CIDR notation such as "
                "'10.0.0.0/8' or 'fd12:3456::/48'"
            ) from None
    return tuple(parsed)


def _v4(value: int) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(value & 0xFFFFFFFF)


def _rfc6052(value: int, prefix_length: int) -> ipaddress.IPv4Address:
    """The IPv4 address an RFC 6052 IPv4-embedded IPv6 address carries after its prefix.

    Bits 64-71 (the "u" octet) are always zero and never carry address bits, so for
    prefixes shorter than /96 the IPv4 address is split around them.
    """
    if prefix_length == 96:
        return _v4(value)
    high_bits = 64 - prefix_length  # IPv4 bits between the prefix and the u octet
    low_bits = 32 - high_bits  # the rest, right after the u octet (bits 72..)
    high = (value >> 64) & ((1 << high_bits) - 1)
    low = (value >> (56 - low_bits)) & ((1 << low_bits) - 1)
    return _v4((high << low_bits) | low)


# RFC 5214: an ISATAP interface identifier is 0000:5efe or 0200:5efe (the "u" bit set
# for a globally unique IPv4 address; the "g" bit may be set too) followed by IPv4.
_ISATAP_MASK = 0xFCFFFFFF
_ISATAP_ID = 0x00005EFE


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[str, list[ipaddress.IPv4Address]]:
    """Return (encoding name, IPv4 addresses carried inside ``ip``), or ("", []).

    Every standard place an IPv6 address can carry an IPv4 address: the IPv4-mapped and
    IPv4-translated (SIIT, RFC 2765/7915) prefixes, the deprecated IPv4-compatible
    ``::/96``, the NAT64 prefixes (RFC 6052/8215), 6to4 (RFC 3056), Teredo (RFC 4380) and
    the ISATAP interface identifier (RFC 5214, under any /64 prefix).
    """
    value = int(ip)
    if ip in _MAPPED:
        return "IPv4-mapped", [_v4(value)]
    if ip in _TRANSLATED:
        return "IPv4-translated (SIIT)", [_v4(value)]
    if ip in _NAT64:
        return "NAT64", [_v4(value)]
    if ip in _NAT64_LOCAL:
        # RFC 8215 local-use prefixes are /48 or longer, and RFC 6052 places the IPv4
        # address right after the prefix: take every position a /48../96 prefix gives.
        found = [_rfc6052(value, length) for length in (48, 56, 64, 96)]
        return "local NAT64", list(dict.fromkeys(found))
    if ip in _SIX_TO_FOUR:
        return "6to4", [_v4(value >> 80)]
    if ip in _TEREDO:
        # RFC 4380: bits 32-63 are the Teredo server, the last 32 bits the client's public
        # IPv4 with every bit inverted. Either being internal is disqualifying.
        server = _v4(value >> 64)
        client = _v4(value ^ 0xFFFFFFFF)
        return "Teredo", [client, server]
    if ip in _COMPATIBLE and value > 1:
        # ::/96 minus :: and ::1, which are their own (unspecified, loopback) addresses.
        return "IPv4-compatible", [_v4(value)]
    if (value >> 32) & _ISATAP_MASK == _ISATAP_ID:
        return "ISATAP", [_v4(value)]
    return "", []


def _block_reason(ip: IPAddress) -> str | None:
    for network, reason in BLOCKED_NETWORKS:
        if ip.version == network.version and ip in network:
            return reason
    if ip.is_multicast:
        return "a multicast address"
    if not ip.is_global:
        return "a non-public address"
    return None


def _in_any(ip: IPAddress, networks: Iterable[IPNetwork]) -> bool:
    return any(ip.version == net.version and ip in net for net in networks)


def _to_address(ip: str | IPAddress) -> IPAddress:
    if isinstance(ip, ipaddress.IPv4Address | ipaddress.IPv6Address):
        address = ip
    else:
        address = ipaddress.ip_address(str(ip).strip("[]"))
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
        # fe80::1%eth0: the zone only selects an interface; classify the address itself.
        address = ipaddress.IPv6Address(address.compressed.split("%", 1)[0])
    return address


def is_address_allowed(
    ip: str | IPAddress,
    allow_networks: Iterable[str | IPNetwork] = (),
    *,
    deny_addresses: Iterable[str | IPAddress] = (),
) -> tuple[bool, str]:
    """Decide whether a webhook may connect to ``ip``; return ``(allowed, reason)``.

    ``reason`` is empty when allowed, otherwise it completes the sentence "… is <reason>",
    for example "a loopback address".

    IPv4-mapped addresses are checked as the IPv4 address they are. The prefixes of the
    other IPv6 forms that embed IPv4 (IPv4-translated/SIIT, IPv4-compatible, NAT64, 6to4,
    Teredo) are blocked unless allow-listed as IPv6, and even then the embedded IPv4 must be
    public or allow-listed itself; an ISATAP interface identifier under any prefix is
    refused when the IPv4 it carries is. The embedded IPv4 is always checked against the
    hard-deny set, so metadata addresses are refused in every encoding. ``allow_networks``
    overrides the block-list except for the hard-deny set; ``deny_addresses`` (the app's
    own addresses) are refused even when allow-listed.
    """
    address = _to_address(ip)
    allow = parse_networks(allow_networks)
    deny = {_to_address(a) for a in deny_addresses}

    encoding: str
    embedded: list[ipaddress.IPv4Address]
    encoding, embedded = ("", [])
    prefix = ""
    reason: str | None
    if isinstance(address, ipaddress.IPv6Address):
        encoding, embedded = _embedded_ipv4(address)
        if encoding == "IPv4-mapped":
            # ::ffff:a.b.c.d is a.b.c.d on the wire: classify it as that IPv4 address.
            address = embedded[0]
            encoding, embedded = ("", [])
            prefix = f"the IPv4-mapped form of {address}, "

    for candidate in (address, *embedded):
        if _in_any(candidate, HARD_DENY_NETWORKS):
            reason = _block_reason(candidate) or "a link-local or metadata address"
            if candidate is not address:
                reason = _carrying(encoding, candidate, reason)
            return False, prefix + reason + " (never allowed, even when allow-listed)"
    for candidate in (address, *embedded):
        if candidate in deny:
            return (
                False,
                prefix + "an address of this server (never allowed, even when allow-listed)",
            )

    if _in_any(address, allow):
        # An allow-listed prefix that carries IPv4 (NAT64 on an IPv6-only network) opens
        # the way to public IPv4 addresses, not to the internal ones the list does not name.
        for inner in embedded:
            inner_reason = None if _in_any(inner, allow) else _block_reason(inner)
            if inner_reason is not None:
                return False, _carrying(encoding, inner, inner_reason)
        return True, ""

    reason = _block_reason(address)
    if reason is not None:
        if embedded:
            inner_text = ", ".join(str(a) for a in embedded)
            reason = f"{reason} carrying {inner_text}"
        return False, prefix + reason
    # An address outside the block-list can still carry an internal one (ISATAP).
    for inner in embedded:
        inner_reason = _block_reason(inner)
        if inner_reason is not None:
            return False, _carrying(encoding, inner, inner_reason)
    return True, ""


def _carrying(encoding: str, inner: IPAddress, reason: str) -> str:
    article = "an" if encoding[:1] in "AEIOUaeiou" else "a"
    return f"{article} {encoding} address carrying {inner}, {reason}"


def _default_resolve(host: str, port: int) -> list[str]:
    # Lazy: urllib3 decides whether this machine can use IPv6 at all, and so do we, so the
    # address we pin is one urllib3 would also have chosen from.
    from urllib3.util.connection import allowed_gai_family

    infos = socket.getaddrinfo(host, port, family=allowed_gai_family(), type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def resolve_host(host: str, port: int, resolver: Resolver | None = None) -> list[IPAddress]:
    """Resolve ``host`` to its addresses, in the resolver's order, without duplicates.

    An IP literal is returned as is, without a lookup. ``resolver`` (``(host, port) ->
    addresses``) replaces ``socket.getaddrinfo``, for tests and custom DNS. Raises
    ``OSError`` (``socket.gaierror``) when the name does not resolve.
    """
    try:
        return [_to_address(host)]
    except ValueError:
        pass
    answers = (resolver or _default_resolve)(host, port)
    addresses: list[IPAddress] = []
    for answer in answers:
        address = answer if not isinstance(answer, str) else ipaddress.ip_address(answer)
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise socket.gaierror(socket.EAI_NONAME, f"no addresses for {host!r}")
    return addresses


def check_host(
    host: str,
    port: int,
    *,
    allow_networks: Iterable[str | IPNetwork] = (),
    resolver: Resolver | None = None,
    deny_addresses: Iterable[str | IPAddress] = (),
    allow_hosts: Iterable[str] = (),
) -> list[IPAddress]:
    """Resolve ``host`` once and return its addresses if **every** one is allowed.

    A mixed answer (one public address, one private) is refused as a whole: it is what DNS
    rebinding looks like, and connecting to "the good one" would depend on answer order.
    A host named in ``allow_hosts`` may resolve to any address except the hard-deny set and
    ``deny_addresses``. Raises :class:`UnsafeURLError` with a message a user can act on.
    """
    allow = parse_networks(allow_networks)
    if isinstance(allow_hosts, str):
        raise ValueError(f"allow_hosts must be a list of host names, not {allow_hosts!r}")
    key = _host_key(host)
    if key in HARD_DENY_HOSTS:
        raise _refused_address(
            host,
            f"The host {host!r} is a cloud metadata host name (never allowed, even when "
            f"allow-listed); {_POLICY_SENTENCE}.",
        )
    if key in {_host_key(h) for h in allow_hosts}:
        allow = _EVERYWHERE
    deny = tuple(deny_addresses)
    try:
        addresses = resolve_host(host, port, resolver)
    except (OSError, UnicodeError) as exc:
        # The customer's own DNS, so the text is theirs too; the resolver's words
        # (which can name internal resolvers or search domains) are the operator's.
        raise UnsafeURLError(
            f"The host {host!r} could not be resolved.",
            f"The host {host!r} could not be resolved ({exc}).",
        ) from None
    for address in addresses:
        allowed, reason = _address_verdict(address, allow, deny)
        if not allowed:
            if _is_literal(host):
                subject = f"The address {address}"
                verb = "is"
            else:
                subject = f"The host {host!r}"
                verb = f"resolves to {address},"
            raise _refused_address(
                host, f"{subject} {verb} {reason}; {_POLICY_SENTENCE}{_allow_hint(reason, host)}."
            )
    return addresses


_EVERYWHERE = (_net("0.0.0.0/0"), _net("::/0"))


# Every request checks the addresses its host resolved to, and a worker sends to the
# same few addresses under the same policy over and over: the verdict is a pure
# function of the three, so it is remembered (bounded). The name is still resolved
# for every request; only the classification of an address already seen is skipped.
@lru_cache(maxsize=4096)
def _address_verdict(
    address: IPAddress, allow: tuple[IPNetwork, ...], deny: tuple[str | IPAddress, ...]
) -> tuple[bool, str]:
    return is_address_allowed(address, allow, deny_addresses=deny)


def _host_key(host: str) -> str:
    return host.strip().rstrip(".").lower()


def _is_literal(host: str) -> bool:
    try:
        _to_address(host)
    except ValueError:
        return False
    return True


# Hosts whose last label is a number are IPv4 literals to URL parsers (WHATWG "ends in a
# number") and to getaddrinfo (inet_aton accepts 2130706433, 0177.0.0.1, 0x7f.1, 127.1).
_NUMERIC_LABEL = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)$", re.IGNORECASE)
_HOST_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
_FORBIDDEN_URL_CHARS = re.compile(r"[\x00-\x20\x7f-\x9f\s]")


def _normalise_host(raw_host: str) -> str:
    """Return the ASCII (IDNA) form of a host name, or raise UnsafeURLError."""
    host = raw_host.rstrip(".") if raw_host.endswith(".") and raw_host != "." else raw_host
    if not host:
        raise UnsafeURLError("The URL has no host.")
    if not host.isascii():
        try:
            import idna  # requests depends on it: IDNA 2008 with UTS #46 mapping

            host = idna.encode(host, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError, ValueError):
            raise UnsafeURLError(f"The host {raw_host!r} is not a valid domain name.") from None
    host = host.lower()
    if len(host) > 253:
        raise UnsafeURLError("The host name is longer than 253 characters.")
    labels = host.split(".")
    if _NUMERIC_LABEL.match(labels[-1]):
        try:
            canonical = str(ipaddress.IPv4Address(host))
        except ValueError:
            canonical = ""
        if canonical != host or raw_host.endswith("."):
            raise UnsafeURLError(
                f"The host {raw_host!r} is a numeric IP address in a non-standard form "
                "(decimal, octal, hexadecimal or shortened); write it as four decimal "
                "numbers such as 203.0.113.7, or use a domain name."
            )
        return host
    for label in labels:
        if not _HOST_LABEL.match(label):
            raise UnsafeURLError(f"The host {raw_host!r} is not a valid domain name.")
    return host


def check_text(url: object) -> None:
    """The checks of a URL as text, before parsing, for every scheme (brokers' too)."""
    if not isinstance(url, str):
        raise UnsafeURLError("The URL must be a string.")
    if not url:
        raise UnsafeURLError("The URL is empty.")
    if len(url) > MAX_URL_LENGTH:
        raise UnsafeURLError(f"The URL is longer than {MAX_URL_LENGTH} characters.")
    # urlsplit silently drops tabs and newlines, so the URL it parses would not be the one
    # the user typed: refuse them instead.
    if _FORBIDDEN_URL_CHARS.search(url):
        raise UnsafeURLError("The URL contains whitespace or control characters.")


def _split(url: str, allow_http: bool) -> tuple[SplitResult, str, int]:
    check_text(url)
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise UnsafeURLError(f"The URL could not be parsed ({exc}).") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise UnsafeURLError(
            f"The URL scheme {parts.scheme or '(none)'!r} is not supported; use https://."
        )
    if scheme == "http" and not allow_http:
        raise UnsafeURLError(
            "Plain http:// URLs are not allowed; use https://.",
            "Plain http:// URLs are not allowed; use https://, or set "
            "PGQUEUE['WEBHOOKS']['ALLOW_HTTP'] = True (a receiver on a private or loopback "
            "address also needs its network in PGQUEUE['WEBHOOKS']['ALLOW_NETWORKS']).",
        )
    if "@" in parts.netloc:
        raise UnsafeURLError(
            "The URL contains a user name or password; put credentials in a custom header."
        )
    if "\\" in parts.netloc:
        # Browsers treat "\" as "/", urlsplit does not: a parser differential waiting to happen.
        raise UnsafeURLError("The URL host contains a backslash.")
    try:
        port = parts.port
    except ValueError:
        raise UnsafeURLError("The URL port is not a number between 0 and 65535.") from None
    if port == 0:
        raise UnsafeURLError("The URL port 0 is not valid.")
    if port is None:
        port = 443 if scheme == "https" else 80
    raw_host = parts.hostname or ""
    if not raw_host:
        raise UnsafeURLError("The URL has no host.")
    return parts, raw_host, port


def check_port(port: int, allowed_ports: Iterable[int] | None) -> None:
    """Refuse ``port`` unless it is in ``allowed_ports`` (``None``: any port)."""
    if allowed_ports is not None:
        ports = set(allowed_ports)
        if port not in ports:
            allowed_text = ", ".join(str(p) for p in sorted(ports)) or "none"
            raise UnsafeURLError(
                f"The port {port} is not allowed; allowed ports: {allowed_text}.",
                f"The port {port} is not allowed; allowed ports: {allowed_text} "
                f"(PGQUEUE['WEBHOOKS']['ALLOWED_PORTS']).",
            )


def validate_url(
    url: str,
    *,
    allow_http: bool,
    allow_networks: Sequence[str | IPNetwork] = (),
    allowed_ports: Iterable[int] | None = None,
    resolve: bool = True,
    resolver: Resolver | None = None,
    deny_addresses: Iterable[str | IPAddress] = (),
    allow_hosts: Iterable[str] = (),
) -> None:
    """Check a webhook URL; raise :class:`UnsafeURLError` with a user-facing message if unsafe.

    Shape: ``https`` (or ``http`` when ``allow_http``), no user info, a host, at most 2048
    characters, no whitespace or control characters, an IDNA-valid host, IPv4 literals only
    in canonical dotted-quad form, the port in ``allowed_ports`` (default: any). Then, if
    ``resolve``, every address the host resolves to must pass :func:`is_address_allowed`
    (hosts named in ``allow_hosts`` may resolve to private addresses, never to metadata ones).

    This is the save-time check, for a good error message; the transport repeats the address
    check at connect time and connects only to the address it checked. HTTP(S) only: an
    endpoint's URL, which may also name a broker, is checked by
    ``webhooks.destinations.validate_url_with_settings``.
    """
    _, raw_host, port = _split(url, allow_http)
    allow = parse_networks(allow_networks)
    check_port(port, allowed_ports)
    if ":" in raw_host:
        # Bracketed IPv6 literal (urlsplit removed the brackets).
        literal, _, zone = raw_host.partition("%")
        try:
            address = ipaddress.IPv6Address(literal)
        except ValueError:
            raise UnsafeURLError(f"The host [{raw_host}] is not a valid IPv6 address.") from None
        allowed, reason = is_address_allowed(address, allow, deny_addresses=deny_addresses)
        if not allowed:
            raise _refused_address(
                f"[{raw_host}]",
                f"The address {address} is {reason}; {_POLICY_SENTENCE}{_allow_hint(reason)}.",
            )
        if zone:
            raise UnsafeURLError("IPv6 zone identifiers (%...) are not allowed in webhook URLs.")
        return
    host = _normalise_host(raw_host)
    if resolve or _is_literal(host):
        check_host(
            host,
            port,
            allow_networks=allow,
            resolver=resolver,
            deny_addresses=deny_addresses,
            allow_hosts=allow_hosts,
        )


@lru_cache(maxsize=1)
def own_host_addresses() -> tuple[IPAddress, ...]:
    """Return the non-loopback addresses this machine's host name resolves to.

    The transport refuses them even when an allow-list covers them, so a webhook cannot be
    pointed back at the application itself (smokescreen does the same). Loopback is left
    to the allow-list: allowing 127.0.0.0/8 is an explicit choice for development and tests.
    Cached: computed once per process.
    """
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM)
    except OSError:
        return ()
    found: list[IPAddress] = []
    for info in infos:
        try:
            address = _to_address(str(info[4][0]))
        except ValueError:
            continue
        if not address.is_loopback and address not in found:
            found.append(address)
    return tuple(found)
