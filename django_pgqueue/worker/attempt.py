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
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction
from django.utils import timezone

from ..compat import TaskContext
from ..conf import get_settings
from ..jobs import store as job_store
from ..storable import storable_text

logger = logging.getLogger("django_pgqueue.worker")

#: Characters of a progress message kept (a longer one is cut).
PROGRESS_MESSAGE_CAP = 500

#: Why an attempt was given up.
TIMED_OUT = "timeout"
ABORTED = "abort"


class Attempt:
    """One run of one claimed row on one task thread."""

    __slots__ = (
        "abandoned",
        "deadline",
        "given_up",
        "item",
        "progress",
        "progress_pending",
        "progress_written",
        "source",
        "started",
        "timeout",
    )

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
        #: The task's latest progress report, whether it still waits to be written
        #: (throttled), and when the last write was (monotonic).
        self.progress: tuple[float, str] | None = None
        self.progress_pending = False
        self.progress_written = -1e18

    def report_progress(self, fraction: float, message: str) -> None:
        """Record a progress report; write it now unless one was written less than
        PGQUEUE["PROGRESS_INTERVAL_SECONDS"] ago (then :meth:`flush_progress`, at
        the end of the attempt, or a later report writes it)."""
        self.progress = (fraction, message)
        now = time.monotonic()
        if now - self.progress_written >= get_settings().PROGRESS_INTERVAL_SECONDS:
            self._write_progress(now)
        else:
            self.progress_pending = True

    def flush_progress(self) -> None:
        """Write the latest report if throttling held it back (the runner calls this
        when the task returns, before its outcome is handed on). Never raises."""
        if self.progress_pending:
            self._write_progress(time.monotonic())

    def _write_progress(self, now: float) -> None:
        self.progress_pending = False
        self.progress_written = now
        if self.progress is None or not hasattr(self.item, "token"):
            return
        fraction, message = self.progress
        db = get_settings().DATABASE
        try:
            # Inside the task's own transaction a savepoint keeps a failed write
            # from breaking it; outside, the write is its own statement.
            if connections[db].in_atomic_block:
                with transaction.atomic(using=db):
                    job_store.set_progress(db, self.item.id, self.item.token, fraction, message)
            else:
                job_store.set_progress(db, self.item.id, self.item.token, fraction, message)
        except Exception as exc:
            logger.warning("Job %s: progress not written (%s)", self.item.id, exc)

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

    def set_progress(self, fraction: float, message: str = "") -> None:
        """Report how far the task is: ``fraction`` from 0 to 1 and a short message
        (``context.set_progress(0.4, "4 of 10 pages")``).

        Shown in the admin and returned by ``get_result`` (``result.metadata``). At
        most one write per PGQUEUE["PROGRESS_INTERVAL_SECONDS"]; the latest report
        is always written before the attempt ends. Outside a worker (a task called
        directly) it is checked and otherwise ignored.
        """
        if (
            isinstance(fraction, bool)
            or not isinstance(fraction, int | float)
            or not math.isfinite(fraction)
            or not 0 <= fraction <= 1
        ):
            raise ValueError(f"set_progress takes a fraction from 0 to 1, got {fraction!r}")
        if not isinstance(message, str):
            raise TypeError(f"set_progress's message must be a str, got {type(message).__name__}")
        if self.run is not None:
            self.run.report_progress(float(fraction), storable_text(message, PROGRESS_MESSAGE_CAP))

    def is_aborted(self) -> bool:
        """True once the attempt was aborted by an operator or ran past its timeout."""
        return self.run is not None and self.run.is_aborted()
