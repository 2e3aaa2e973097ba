"""Which request headers the attempt log shows with their values, and which redacted.

The attempt log records the headers each attempt sent (HTTP request headers, or a
broker message's headers), so an operator or a customer can see exactly what left.
Some headers carry credentials: an endpoint's custom headers are where a receiver's
token goes (``Authorization: Bearer ...``, ``X-Api-Key``). The rule is declared here,
once, and applies to every header whatever set it:

* a header is redacted when its name, compared without case, is one of
  :data:`SENSITIVE_NAMES`, contains one of :data:`SENSITIVE_PARTS`, or is listed in
  ``PGQUEUE["WEBHOOKS"]["REDACT_HEADERS"]``;
* a redacted header keeps its name (the receiver's log and ours can still be compared)
  and its value becomes :data:`REDACTED`.

The Standard Webhooks headers are recorded as sent: ``webhook-signature`` is an HMAC of
this one message, which the receiver sees anyway and which reveals nothing of the
secret; it is what a receiver's failed verification is debugged with.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping

__all__ = ["REDACTED", "SENSITIVE_NAMES", "SENSITIVE_PARTS", "is_sensitive", "redact_headers"]

#: The value a redacted header is recorded with.
REDACTED = "[redacted]"

#: Header names that carry credentials by definition (RFC 9110, RFC 6265) or by
#: near-universal convention.
SENSITIVE_NAMES = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"}
)

#: Parts of a header name that say it carries a credential (``X-Auth-Token``,
#: ``X-Shop-Secret``, ``X-Session-Id``, ``X-Client-Password``, ``X-Apikey``).
#: ``key`` alone is not one of them: ``Idempotency-Key`` is not a secret.
SENSITIVE_PARTS = (
    "auth",
    "token",
    "secret",
    "passw",
    "session",
    "cookie",
    "credential",
    "apikey",
    "api-key",
    "api_key",
    "access-key",
    "private-key",
)


def is_sensitive(name: str, extra: Collection[str] = ()) -> bool:
    """Whether the header ``name`` is recorded redacted (``extra``: REDACT_HEADERS,
    lower-cased)."""
    lowered = name.lower()
    return (
        lowered in SENSITIVE_NAMES
        or lowered in extra
        or any(part in lowered for part in SENSITIVE_PARTS)
    )


def redact_headers(headers: Mapping[str, str], extra: Collection[str] = ()) -> dict[str, str]:
    """``headers`` as the attempt log records them: sensitive values replaced by
    :data:`REDACTED`, names and order kept."""
    extra_key = extra if isinstance(extra, frozenset) else frozenset(extra)
    return {
        name: REDACTED if _sensitive(name, extra_key) else value for name, value in headers.items()
    }


# Every attempt records the same few header names (the Standard Webhooks ones, the
# endpoint's own): the verdict is a pure function of the name and REDACT_HEADERS, so it
# is remembered, bounded, instead of scanning SENSITIVE_PARTS nine times per attempt.
@functools.lru_cache(maxsize=4096)
def _sensitive(name: str, extra: frozenset[str]) -> bool:
    return is_sensitive(name, extra)
