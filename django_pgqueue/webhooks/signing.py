"""Standard Webhooks (Svix-compatible) v1 symmetric signatures, and the headers we send.

The scheme: ``v1,`` + base64(HMAC-SHA256(key, f"{msg_id}.{timestamp}.".encode() + body)),
where ``key`` is the base64-decoded part of a ``whsec_<base64>`` secret. A receiver may get
several space-separated signatures (one per active secret during a key rotation) and accepts
the message if any ``v1`` signature matches.

This module is pure: no Django, no models, no I/O, so it can be used by receivers and tests
without settings configured.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets as _secrets
import time
from collections.abc import Mapping, Sequence

from django_pgqueue.__about__ import __version__

__all__ = [
    "SECRET_PREFIX",
    "WebhookVerificationError",
    "build_headers",
    "generate_secret",
    "new_message_id",
    "parse_secret",
    "sign",
    "signature_header",
    "validate_custom_headers",
    "verify",
]

SECRET_PREFIX = "whsec_"  # noqa: S105 - a format prefix, not a secret
# Standard Webhooks: "secrets are whsec_ followed by base64 of 24 to 64 random bytes".
MIN_SECRET_BYTES = 24
MAX_SECRET_BYTES = 64
DEFAULT_TOLERANCE_SECONDS = 300
MAX_CUSTOM_HEADER_VALUE_BYTES = 4096

USER_AGENT = f"django-pgqueue/{__version__}"

# RFC 7230 section 3.2.6: token = 1*tchar.
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# Control characters other than horizontal tab are not allowed in a field value (RFC 7230
# section 3.2); CR, LF and NUL get their own message because they are the injection ones.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# What str.isspace() calls whitespace (re's \s in a str pattern uses the same test).
_WHITESPACE = re.compile(r"\s")

# Headers we set ourselves, or that belong to the connection rather than the message: letting
# an endpoint owner override them would break framing (request smuggling), the signature, or
# our guarantees (Accept-Encoding identity keeps decompression bombs out).
_FORBIDDEN_HEADER_NAMES = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "idempotency-key",
        "user-agent",
        "content-type",
        "accept-encoding",
        "cookie",
    }
)
_FORBIDDEN_HEADER_PREFIXES = ("proxy-", "webhook-")


class WebhookVerificationError(ValueError):
    """A webhook failed verification: missing headers, bad timestamp or no matching signature."""


def generate_secret(nbytes: int = 32) -> str:
    """Return a new signing secret: ``whsec_`` followed by base64 of ``nbytes`` random bytes.

    ``nbytes`` must be between 24 and 64, the range Standard Webhooks allows.
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise TypeError(f"nbytes must be an int, got {type(nbytes).__name__}")
    if not MIN_SECRET_BYTES <= nbytes <= MAX_SECRET_BYTES:
        raise ValueError(
            f"nbytes must be between {MIN_SECRET_BYTES} and {MAX_SECRET_BYTES}, got {nbytes}"
        )
    return SECRET_PREFIX + base64.b64encode(_secrets.token_bytes(nbytes)).decode("ascii")


def parse_secret(secret: str) -> bytes:
    """Return the HMAC key of a ``whsec_<base64>`` secret (the prefix is optional).

    Raises ``ValueError`` naming the problem. The message never contains the secret, because
    these errors end up in logs and admin pages.
    """
    if not isinstance(secret, str):
        raise TypeError(f"a webhook secret must be a str, got {type(secret).__name__}")
    encoded = secret.removeprefix(SECRET_PREFIX)
    if not encoded:
        raise ValueError("the webhook secret is empty; expected 'whsec_' followed by base64")
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(
            "the webhook secret is not valid base64 after the optional 'whsec_' prefix"
        ) from None
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise ValueError(
            f"the webhook secret decodes to {len(key)} bytes; it must be "
            f"{MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes"
        )
    return key


def _check_message_id(msg_id: str) -> None:
    # The signed content is "{id}.{timestamp}.{body}": an id containing "." or whitespace
    # would make two different (id, timestamp) pairs sign the same bytes.
    if not isinstance(msg_id, str) or not msg_id:
        raise ValueError("the message id must be a non-empty str")
    if "." in msg_id or _WHITESPACE.search(msg_id):
        raise ValueError(f"the message id {msg_id!r} must not contain '.' or whitespace")


def _check_timestamp(timestamp: int) -> None:
    if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
        raise ValueError(
            f"the timestamp must be a non-negative int (Unix seconds), got {timestamp!r}"
        )


def _signature(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    if not isinstance(body, bytes | bytearray | memoryview):
        raise TypeError(f"the body must be bytes, got {type(body).__name__}")
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode(), hashlib.sha256)
    mac.update(body)
    return base64.b64encode(mac.digest()).decode("ascii")


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """Return the ``v1,<base64>`` signature of ``body`` for one secret."""
    _check_message_id(msg_id)
    _check_timestamp(timestamp)
    return "v1," + _signature(parse_secret(secret), msg_id, timestamp, body)


def signature_header(secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """Return the ``webhook-signature`` value: one signature per active secret, space-separated.

    Several secrets are active during a key rotation, so receivers holding either the old or
    the new secret can verify the same message.
    """
    if isinstance(secrets, str):
        # A bare string is a sequence of characters: catch the easy mistake early.
        raise TypeError("secrets must be a list of secrets, not a single str")
    if not secrets:
        raise ValueError("at least one secret is needed to sign a webhook")
    return " ".join(sign(secret, msg_id, timestamp, body) for secret in secrets)


def new_message_id() -> str:
    """Return a new unique message id: ``msg_`` followed by URL-safe random characters.

    ``token_urlsafe`` uses ``[A-Za-z0-9_-]`` only, so the id never contains the ``.`` that
    separates the parts of the signed content.
    """
    return "msg_" + _secrets.token_urlsafe(18)


def _lookup(headers: Mapping[str, str], *names: str) -> str | None:
    lowered = {str(key).lower(): value for key, value in headers.items()}
    for name in names:
        value = lowered.get(name)
        if value is not None:
            return value
    return None


def verify(
    secret: str,
    body: bytes,
    headers: Mapping[str, str],
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> None:
    """Verify a received webhook; return ``None`` or raise ``WebhookVerificationError``.

    ``headers`` are looked up case-insensitively (``webhook-*``, with ``svix-*`` as a fallback
    for Svix senders). The timestamp must be within ``tolerance`` seconds of ``now`` (Unix
    seconds, default: the current time) in either direction, which bounds replays. Signatures
    of unknown versions (``v2,...``) are skipped; comparison is constant-time.
    """
    key = parse_secret(secret)
    msg_id = _lookup(headers, "webhook-id", "svix-id")
    raw_timestamp = _lookup(headers, "webhook-timestamp", "svix-timestamp")
    raw_signatures = _lookup(headers, "webhook-signature", "svix-signature")
    missing = [
        name
        for name, value in (
            ("webhook-id", msg_id),
            ("webhook-timestamp", raw_timestamp),
            ("webhook-signature", raw_signatures),
        )
        if not value
    ]
    if missing:
        raise WebhookVerificationError(f"missing required header(s): {', '.join(missing)}")
    assert msg_id is not None and raw_timestamp is not None and raw_signatures is not None

    raw_timestamp = raw_timestamp.strip()
    if not raw_timestamp.isascii() or not raw_timestamp.isdigit():
        raise WebhookVerificationError(
            f"invalid webhook-timestamp {raw_timestamp[:40]!r}: expected Unix seconds"
        )
    timestamp = int(raw_timestamp)
    current = time.time() if now is None else now
    if timestamp < current - tolerance:
        raise WebhookVerificationError(
            f"webhook-timestamp is too old ({int(current - timestamp)} s ago, "
            f"tolerance {tolerance} s)"
        )
    if timestamp > current + tolerance:
        raise WebhookVerificationError(
            f"webhook-timestamp is too far in the future ({int(timestamp - current)} s ahead, "
            f"tolerance {tolerance} s)"
        )

    expected = _signature(key, msg_id, timestamp, body).encode("ascii")
    for candidate in raw_signatures.split():
        version, _, value = candidate.partition(",")
        if version != "v1":
            continue
        # compare_digest needs equal types; non-ASCII input simply cannot match.
        if hmac.compare_digest(expected, value.encode("utf-8", "replace")):
            return
    raise WebhookVerificationError("no matching v1 signature in webhook-signature")


def validate_custom_headers(headers: Mapping[str, str]) -> None:
    """Raise ``ValueError`` if endpoint-configured headers are unsafe to send.

    Refused: CR, LF, NUL or other control characters (header injection), names that are not
    RFC 7230 tokens, names we own or that control framing (``Host``, ``Content-Length``,
    ``Transfer-Encoding``, ``Connection``, ``Proxy-*``, ``webhook-*``, ...), and values longer
    than 4096 bytes. Messages name the header, never its value, which may be a credential.
    """
    if not isinstance(headers, Mapping):
        raise ValueError(f"custom headers must be a mapping, got {type(headers).__name__}")
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise ValueError(f"custom header {name!r}: names and values must be strings")
        if any(ch in name for ch in "\r\n\x00"):
            raise ValueError(f"custom header name {name!r} contains CR, LF or NUL")
        if not _TOKEN.match(name):
            raise ValueError(
                f"custom header name {name!r} is not a valid HTTP header name "
                "(letters, digits and !#$%&'*+-.^_`|~ only)"
            )
        lowered = name.lower()
        if lowered in _FORBIDDEN_HEADER_NAMES or lowered.startswith(_FORBIDDEN_HEADER_PREFIXES):
            raise ValueError(
                f"custom header {name!r} is set by the webhook sender or controls the "
                "connection, and cannot be overridden"
            )
        if any(ch in value for ch in "\r\n\x00"):
            raise ValueError(f"the value of custom header {name!r} contains CR, LF or NUL")
        if _CONTROL.search(value):
            raise ValueError(f"the value of custom header {name!r} contains a control character")
        try:
            encoded = value.encode("latin-1")
        except UnicodeEncodeError:
            # http.client sends header values as Latin-1; anything else fails at send time.
            raise ValueError(
                f"the value of custom header {name!r} contains characters outside Latin-1"
            ) from None
        if len(encoded) > MAX_CUSTOM_HEADER_VALUE_BYTES:
            raise ValueError(
                f"the value of custom header {name!r} is {len(encoded)} bytes; "
                f"the limit is {MAX_CUSTOM_HEADER_VALUE_BYTES}"
            )


def build_headers(
    *,
    secrets: Sequence[str],
    msg_id: str,
    timestamp: int,
    body: bytes,
    idempotency_key: str,
    custom_headers: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Return every header of one webhook request, signed with each active secret.

    ``custom_headers`` (configured per endpoint) are validated and sent too; they can never
    replace the headers set here.
    """
    if not isinstance(idempotency_key, str) or not idempotency_key.strip():
        raise ValueError("the idempotency key must be a non-empty str")
    if _CONTROL.search(idempotency_key):
        raise ValueError("the idempotency key contains a control character")
    headers: dict[str, str] = {}
    if custom_headers:
        validate_custom_headers(custom_headers)
        headers.update(custom_headers)
    headers.update(
        {
            "Content-Type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signature_header(secrets, msg_id, timestamp, body),
            "Idempotency-Key": idempotency_key,
            "User-Agent": USER_AGENT,
            # No compressed responses: we store a capped prefix of the body and never want
            # to inflate a decompression bomb.
            "Accept-Encoding": "identity",
        }
    )
    return headers
