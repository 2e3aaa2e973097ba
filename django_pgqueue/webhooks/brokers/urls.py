"""Broker destination URLs: their shape, their SSRF check and their masked form.

An endpoint whose URL starts with ``amqp://`` or ``nats://`` is a broker destination::

    amqp://USER:PASS@HOST:PORT/VHOST?exchange=NAME&routing_key=KEY
    nats://[USER:PASS@]HOST:PORT?subject=NAME

The host goes through the same address rules as an HTTP receiver's
(:func:`django_pgqueue.webhooks.ssrf.check_host`, the ``ALLOW_NETWORKS`` and
``ALLOW_HOSTS`` allow-lists), at save time and again at every connect. Unlike an HTTP
URL, a broker URL may carry credentials (a broker has no custom headers to put them
in), so every text this module produces leaves the password out: :func:`masked`
is the form shown back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

from ..ssrf import (
    IPAddress,
    IPNetwork,
    Resolver,
    UnsafeURLError,
    _normalise_host,
    check_host,
    check_port,
    check_text,
)

__all__ = [
    "BROKER_SCHEMES",
    "BrokerURL",
    "has_typed_password",
    "is_broker_url",
    "masked",
    "open_password",
    "parse",
    "require_client",
    "reseal_password",
    "restore_password",
    "seal_password",
    "validate",
]

#: Scheme -> default port.
BROKER_SCHEMES = {"amqp": 5672, "nats": 4222}
_QUERY_KEYS = {"amqp": {"exchange", "routing_key"}, "nats": {"subject"}}
# NATS subjects: dot-separated tokens, no whitespace; a publish names one subject, so
# the wildcards "*" and ">" are refused.
_SUBJECT_FORBIDDEN = set(" \t*>")
_MASK = "***"


@dataclass(frozen=True)
class BrokerURL:
    """One parsed broker destination. ``password`` never appears in ``repr``."""

    scheme: str
    host: str
    port: int
    username: str
    password: str
    vhost: str = "/"
    exchange: str = ""
    routing_key: str = ""
    subject: str = ""

    def __repr__(self) -> str:
        return f"<BrokerURL {self.scheme}://{self.host}:{self.port}>"


def is_broker_url(url: object) -> bool:
    """True when ``url`` names a broker destination (by its scheme), not an HTTP receiver."""
    if not isinstance(url, str):
        return False
    scheme, sep, _ = url.partition(":")
    return bool(sep) and scheme.lower() in BROKER_SCHEMES


def _password_span(url: str) -> tuple[int, int] | None:
    """Where the password of a broker URL is in the string, if it has one.

    The user info ends at the last "@" before the path or query (a password may hold
    "@" written as %40, never a bare "/" or "?"), whether or not the rest parses.
    """
    if not is_broker_url(url) or "@" not in url:
        return None
    start = url.index("://") + 3
    rest = url[start:]
    end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    at = rest.rfind("@", 0, end)
    colon = rest.find(":", 0, at)
    if at < 0 or colon < 0:
        return None
    return start + colon + 1, start + at


def masked(url: str) -> str:
    """``url`` with its password replaced by ``***``: the form shown in the admin and logs."""
    span = _password_span(url)
    return url if span is None else url[: span[0]] + _MASK + url[span[1] :]


def has_typed_password(url: object) -> bool:
    """True when ``url`` is a broker URL carrying a password as typed, neither empty nor
    the ``***`` that keeps the stored one: a form refused for another reason shows it
    masked, so the password must be typed again."""
    if not isinstance(url, str):
        return False
    span = _password_span(url)
    return span is not None and url[span[0] : span[1]] not in ("", _MASK)


#: How a stored broker URL's password starts: what follows is its Fernet token.
SEALED_PREFIX = "~sealed~"


def seal_password(url: str) -> str:
    """``url`` with its password encrypted, as the endpoint row stores it.

    The password is encrypted like a signing secret (``webhooks/crypto.py``, the
    ``ENCRYPTION_KEYS``), in place: the row keeps one URL column that the claim reads,
    and a Fernet token is URL-safe. A password already sealed is left as it is.
    """
    span = _password_span(url)
    if span is None:
        return url
    raw = url[span[0] : span[1]]
    if raw.startswith(SEALED_PREFIX) or raw == _MASK:
        return url
    from ..crypto import encrypt_secret

    return url[: span[0]] + SEALED_PREFIX + encrypt_secret(unquote(raw)) + url[span[1] :]


def reseal_password(url: str) -> str:
    """``url`` with its sealed password re-encrypted with the first key (key rotation)."""
    span = _password_span(url)
    if span is None or not url[span[0] : span[1]].startswith(SEALED_PREFIX):
        return url
    from ..crypto import rotate_token

    token = url[span[0] + len(SEALED_PREFIX) : span[1]]
    return url[: span[0]] + SEALED_PREFIX + rotate_token(token) + url[span[1] :]


def open_password(password: str, *, what: str) -> str:
    """The plaintext of a parsed password, sealed or not; raises
    :class:`~django_pgqueue.webhooks.crypto.SecretDecryptionError` naming ``what``."""
    if not password.startswith(SEALED_PREFIX):
        return password
    from ..crypto import decrypt_secret

    return decrypt_secret(password[len(SEALED_PREFIX) :], what=what)


def restore_password(url: str, stored: str) -> str:
    """``url`` as edited from its masked form: ``***`` becomes the stored password.

    The admin, the API and the portal show a broker URL masked, so an edit that keeps
    the password sends ``***`` back. The stored password is put back only for the same
    scheme, host, port and user: pointed elsewhere, the URL must carry its password
    again, or the old one would be sent to a host it was never meant for.
    """
    span = _password_span(url)
    if span is None or url[span[0] : span[1]] != _MASK:
        return url
    stored_span = _password_span(stored)
    try:
        new, old = urlsplit(url), urlsplit(stored)
        same = (new.scheme.lower(), new.hostname, new.port, new.username) == (
            old.scheme.lower(),
            old.hostname,
            old.port,
            old.username,
        )
    except ValueError:
        same = False
    if stored_span is None or not same:
        raise UnsafeURLError(
            "The password is masked (***): write it again. A masked password is kept "
            "only when an endpoint is edited and its scheme, host, port and user name stay "
            "the same."
        )
    return url[: span[0]] + stored[stored_span[0] : stored_span[1]] + url[span[1] :]


def parse(url: str) -> BrokerURL:
    """Parse a broker URL, or raise :class:`UnsafeURLError` naming what is wrong.

    The messages never contain the URL's user info.
    """
    check_text(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise UnsafeURLError(
            "The broker URL could not be parsed (is the port a number between 1 and 65535?)."
        ) from None
    scheme = parts.scheme.lower()
    if port == 0:
        raise UnsafeURLError("The URL port 0 is not valid.")
    if "\\" in parts.netloc:
        raise UnsafeURLError("The URL host contains a backslash.")
    raw_host = parts.hostname or ""
    if ":" in raw_host:
        raise UnsafeURLError("IPv6 literals are not supported in broker URLs; use a host name.")
    host = _normalise_host(raw_host)
    query: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key not in _QUERY_KEYS[scheme]:
            allowed = " and ".join(sorted(_QUERY_KEYS[scheme]))
            raise UnsafeURLError(
                f"The {scheme}:// URL parameter {key!r} is not known; it takes {allowed}."
            )
        if key in query:
            raise UnsafeURLError(f"The {scheme}:// URL names {key!r} twice.")
        query[key] = value
    port = port or BROKER_SCHEMES[scheme]
    username = unquote(parts.username or "")
    password = unquote(parts.password or "")
    if scheme == "amqp":
        exchange = query.get("exchange", "")
        if not exchange:
            raise UnsafeURLError(
                "The amqp:// URL has no exchange: add ?exchange=NAME (and &routing_key=KEY)."
            )
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        if "/" in path:
            raise UnsafeURLError(
                "The amqp:// URL path is the virtual host: write a '/' inside it as %2F."
            )
        return BrokerURL(
            scheme,
            host,
            port,
            username,
            password,
            vhost=unquote(path) or "/",
            exchange=exchange,
            routing_key=query.get("routing_key", ""),
        )
    if parts.path not in ("", "/"):
        raise UnsafeURLError("The nats:// URL has no path: name the subject with ?subject=NAME.")
    subject = query.get("subject", "")
    if not subject:
        raise UnsafeURLError("The nats:// URL has no subject: add ?subject=NAME.")
    if _SUBJECT_FORBIDDEN & set(subject) or "" in subject.split("."):
        raise UnsafeURLError(
            f"The NATS subject {subject!r} is not one subject: dot-separated tokens, "
            "no spaces and no wildcards (* or >)."
        )
    return BrokerURL(scheme, host, port, username, password, subject=subject)


def validate(
    url: str,
    *,
    allow_networks: Sequence[str | IPNetwork] = (),
    allowed_ports: Iterable[int] | None = None,
    resolve: bool = True,
    resolver: Resolver | None = None,
    deny_addresses: Iterable[str | IPAddress] = (),
    allow_hosts: Iterable[str] = (),
) -> list[IPAddress]:
    """Check a broker URL as :func:`~django_pgqueue.webhooks.ssrf.validate_url` checks an
    HTTP one; return the checked addresses (empty when not ``resolve``).

    Also refuses a destination whose client library is not installed, so an endpoint
    nobody can deliver to is never saved.
    """
    target = parse(url)
    require_client(target.scheme)
    check_port(target.port, allowed_ports)
    if not resolve:
        return []
    return check_host(
        target.host,
        target.port,
        allow_networks=allow_networks,
        resolver=resolver,
        deny_addresses=deny_addresses,
        allow_hosts=allow_hosts,
    )


_CLIENTS = {"amqp": "pika", "nats": "nats"}


def require_client(scheme: str) -> None:
    """Raise :class:`UnsafeURLError` when the client library of ``scheme`` is missing."""
    import importlib.util

    if importlib.util.find_spec(_CLIENTS[scheme]) is None:
        raise UnsafeURLError(
            f"{scheme}:// destinations need the broker clients: "
            "install the 'brokers' extra (pip install -e '.[brokers]' in a checkout)."
        )
