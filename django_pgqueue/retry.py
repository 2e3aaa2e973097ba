"""Retry policy: pure functions of (attempt, error), unit-testable without a clock.

A task's ``backoff`` is a callable ``backoff(exception, task_result) -> seconds |
None``; ``None`` stops retrying (the row goes to the dead-letter queue). The
default is exponential backoff with full jitter, capped.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

#: Default first delay and cap, in seconds (``TASKS[alias]["OPTIONS"]``:
#: ``BACKOFF_BASE`` and ``BACKOFF_CAP``).
DEFAULT_BASE = 2.0
DEFAULT_CAP = 3600.0
#: Shortest delay, so a retry never fires in the same instant as the failure.
MIN_DELAY = 0.001

Backoff = Callable[[BaseException, Any], "float | None"]


def exponential_delay(
    attempt: int,
    *,
    base: float = DEFAULT_BASE,
    cap: float = DEFAULT_CAP,
    rand: Callable[[], float] = random.random,
) -> float:
    """Delay before retry number ``attempt`` (1-based), with full jitter.

    Uniform in ``(0, min(cap, base * 2 ** (attempt - 1))]``: full jitter spreads
    the retries of many jobs that failed together (a receiver outage, a deploy)
    instead of sending them back in waves.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be 1 or more, got {attempt}")
    ceiling = min(cap, base * 2.0 ** min(attempt - 1, 62))
    return max(MIN_DELAY, ceiling * (1.0 - rand()))


def jittered_schedule(
    attempt: int,
    schedule: list[float],
    *,
    jitter: float = 0.2,
    rand: Callable[[], float] = random.random,
) -> float | None:
    """Delay before retry ``attempt`` from a fixed schedule (webhooks), or None when done.

    ``schedule[0]`` is the delay after the first failure. Each delay moves by up
    to ``±jitter`` of itself.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be 1 or more, got {attempt}")
    if attempt > len(schedule):
        return None
    delay = schedule[attempt - 1]
    return max(0.0, delay * (1.0 + jitter * (2.0 * rand() - 1.0)))


def default_backoff(base: float = DEFAULT_BASE, cap: float = DEFAULT_CAP) -> Backoff:
    """The default ``backoff`` callable: exponential with full jitter, capped."""

    def backoff(exception: BaseException, task_result: Any) -> float:
        return exponential_delay(task_result.attempts, base=base, cap=cap)

    backoff.__qualname__ = f"default_backoff(base={base}, cap={cap})"
    return backoff
