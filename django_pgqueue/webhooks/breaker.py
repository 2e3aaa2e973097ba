"""What one delivery attempt means for its retry and its endpoint's circuit breaker.

Pure functions of the attempt's result and the settings; the state changes they
feed are single UPDATEs in ``sql.COMPLETE_DELIVERIES`` (counters incremented in
place under the row lock, so concurrent workers never lose a failure).

The breaker, per endpoint::

    closed --(BREAKER_THRESHOLD failures in a row)--> open
    open --(cool-down over: one claim sends one probe)--> half_open
    half_open --(probe succeeds)--> closed
    half_open --(probe fails)--> open, cool-down doubled (up to BREAKER_MAX_COOLDOWN)
    any --(410 Gone, or no success for DISABLE_AFTER)--> endpoint deactivated

While open (or half-open, or deactivated) the endpoint's deliveries are not
claimed, so no attempts are used up; they go out once it closes or is re-enabled.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from ..retry import jittered_schedule
from .transport import TransportResult, parse_retry_after

#: Verdicts, as ``sql.COMPLETE_DELIVERIES`` reads them.
SUCCESS = "success"
FAILURE = "failure"
GONE = "gone"
#: The attempt failed on our side (a secret that cannot be decrypted, a shutdown
#: cutting the request): logged and retried, but the endpoint is not blamed.
LOCAL_ERROR = "local"
#: Not sent (released by a shutdown): no attempt row, no breaker change.
NOT_SENT = "none"

#: Statuses whose Retry-After header is honoured.
RETRY_AFTER_STATUSES = frozenset({429, 503})


def verdict(result: TransportResult) -> str:
    """Success (2xx), Gone (410: the receiver asks to be switched off) or failure."""
    if result.ok:
        return SUCCESS
    if result.error is None and result.status_code == 410:
        return GONE
    return FAILURE


def retry_delay(
    attempt: int,
    max_attempts: int,
    result: TransportResult,
    conf: Mapping[str, Any],
    rand: Callable[[], float] = random.random,
) -> float | None:
    """Seconds until the next attempt after failed attempt ``attempt``; None when done.

    The schedule (with jitter) gives the delay; a ``Retry-After`` on a 429 or 503 can
    only push it later, and at most to ``RETRY_AFTER_CAP``.
    """
    if attempt >= max_attempts:
        return None
    delay = jittered_schedule(
        attempt, conf["RETRY_SCHEDULE"], jitter=conf["RETRY_JITTER"], rand=rand
    )
    if delay is None:
        return None
    if result.status_code in RETRY_AFTER_STATUSES:
        asked = parse_retry_after(_header(result.headers, "retry-after"))
        if asked is not None:
            delay = max(delay, min(asked, conf["RETRY_AFTER_CAP"]))
    return delay


def refused_by_configuration(result: TransportResult) -> bool:
    """The SSRF policy (``ALLOW_HTTP``, ``ALLOW_NETWORKS``...) refused the URL: not sent.

    A host that does not resolve is refused too, but that is the receiver's DNS, so it
    is an ordinary failure.
    """
    error = result.error or ""
    return error.startswith("refused:") and "could not be resolved" not in error


def refusal_delay(attempt: int, schedule_delay: float, conf: Mapping[str, Any]) -> float:
    """When to try a delivery again after attempt ``attempt`` was refused by configuration.

    Refusals are instant, so the retry schedule (0 s, 5 s, 5 min...) would burn its
    first attempts in seconds, before anyone could change a setting. They wait at the
    breaker's pace instead, ``BREAKER_COOLDOWN`` doubled per attempt up to
    ``BREAKER_MAX_COOLDOWN``, or the schedule's delay when that is longer. Saving the
    endpoint in the admin, the API or the portal makes them due at once
    (``store.save_endpoint``, ``store.retry_refused_deliveries``).
    """
    cooldown = conf["BREAKER_COOLDOWN"] * 2 ** max(0, attempt - 1)
    return max(schedule_delay, min(conf["BREAKER_MAX_COOLDOWN"], cooldown))


def max_attempts(conf: Mapping[str, Any]) -> int:
    """Attempts of a new delivery: the first one plus one per retry in the schedule."""
    return len(conf["RETRY_SCHEDULE"]) + 1


def breaker_params(conf: Mapping[str, Any]) -> dict[str, float | int]:
    """The breaker settings as ``sql.COMPLETE_DELIVERIES`` parameters."""
    return {
        "threshold": conf["BREAKER_THRESHOLD"],
        "cooldown": conf["BREAKER_COOLDOWN"],
        "max_cooldown": max(conf["BREAKER_MAX_COOLDOWN"], conf["BREAKER_COOLDOWN"]),
        "disable_after": conf["DISABLE_AFTER"],
    }


def describe_failure(result: TransportResult) -> str:
    """One line for ``last_error``: the transport error, or the HTTP status."""
    if result.error:
        return result.error
    return f"HTTP {result.status_code}"


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None
