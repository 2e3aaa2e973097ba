"""The attempt a task thread is running: its deadline and whether it was given up.

The worker's watchdog (``worker.py``) reads an :class:`Attempt` to time it out or
abort it; the task reads the same object to stop cooperatively, through
:func:`current_attempt` or the ``context`` of a ``takes_context`` task
(:class:`AttemptContext`). A thread cannot be killed, so a task that never looks
keeps running after it was given up: its result is then discarded (the row's
claim token no longer matches) and the thread ends when the task returns.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from ..compat import TaskContext

#: Why an attempt was given up.
TIMED_OUT = "timeout"
ABORTED = "abort"


class Attempt:
    """One run of one claimed row on one task thread."""

    __slots__ = ("abandoned", "deadline", "given_up", "item", "source", "started", "timeout")

    def __init__(self, source: Any, item: Any) -> None:
        self.source = source
        self.item = item
        self.started = time.monotonic()
        #: Seconds the attempt may run (None: no limit), and when that is up (monotonic).
        self.timeout: float | None = None
        self.deadline: float | None = None
        #: TIMED_OUT or ABORTED once the worker gave the attempt up.
        self.given_up: str | None = None
        #: Set by the watchdog when it recorded the attempt's outcome itself: the
        #: thread discards whatever the task returns and ends.
        self.abandoned = False

    def set_timeout(self, seconds: float | None) -> None:
        self.timeout = seconds
        self.deadline = None if seconds is None else self.started + seconds

    def limit_to(self, seconds: float) -> None:
        """Set the timeout to ``seconds`` unless a shorter one is set (two bounds apply
        to an atomic task: its own timeout and its transaction's)."""
        if self.timeout is None or seconds < self.timeout:
            self.set_timeout(seconds)

    def is_aborted(self) -> bool:
        """True once the attempt was given up (aborted, or past its deadline): stop now.

        Whatever the task does after that is not recorded.
        """
        return self.given_up is not None

    def remaining(self) -> float | None:
        """Seconds left before the deadline (negative once past it); None without one."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    @property
    def deadline_at(self) -> dt.datetime | None:
        """The deadline as an aware datetime (this host's clock), or None."""
        left = self.remaining()
        return None if left is None else timezone.now() + dt.timedelta(seconds=left)


_current = threading.local()


def current_attempt() -> Attempt | None:
    """The attempt the calling thread is running for a worker, or None outside one."""
    return getattr(_current, "attempt", None)


def set_current(attempt: Attempt | None) -> None:
    _current.attempt = attempt


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptContext(TaskContext):  # type: ignore[misc]  # frozen at run time; the stubs say not
    """The ``context`` a ``takes_context`` task receives from this backend's workers.

    Django's ``TaskContext`` (``task_result``, ``attempt``) plus this attempt's
    ``deadline`` (an aware datetime, or None without a timeout) and
    :meth:`is_aborted`, for a task that checks cooperatively.
    """

    run: Attempt | None = None

    @property
    def deadline(self) -> dt.datetime | None:
        return None if self.run is None else self.run.deadline_at

    def is_aborted(self) -> bool:
        """True once the attempt was aborted by an operator or ran past its timeout."""
        return self.run is not None and self.run.is_aborted()
