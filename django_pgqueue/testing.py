"""Run queued jobs and webhook deliveries inside your own tests, in-process.

Code that enqueues can be tested end to end without a worker, threads or sleeps::

    from django_pgqueue.testing import run_jobs

    def test_checkout(db):
        with run_jobs() as report:       # runs what the block enqueued, at its end
            checkout(order)
        assert report.succeeded == 1

or call :func:`run_queued_jobs` whenever the test wants the queue drained, or
use the ``pgqueue_jobs`` pytest fixture (``pytest_plugins =
["django_pgqueue.testing"]`` in your ``conftest.py``).

Jobs run in the calling thread, on the test's own database connection and
transaction: they see the test's uncommitted rows, and Django's ``TestCase``
rolls their effects back with everything else. The claim, the task and the
completion are the worker's own code (sql.CLAIM_JOBS, TaskRunner,
sql.COMPLETE_JOBS), so retries, backoff, timeouts and the dead-letter queue behave
as in production; only the wait for a retry's backoff is skipped (``retries="now"``).
Webhook deliveries are sent only when asked (``webhooks=True``): a test's fixtures
may name real receivers. The claim honours the queues' flow control
(docs/flow-control.md): a paused queue's jobs are left pending, and a limit caps
one claim's batch (each batch is completed before the next claim, so a concurrency
limit never stops the drain; a spent rate limit does, leaving the jobs over it
pending). ``PGQUEUE["QUEUES"]`` is applied first, as a worker does when it starts.
docs/testing.md says what works under ``TestCase`` and what needs
``TransactionTestCase``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from django.db import connections

from . import queues as queue_settings
from .conf import get_settings
from .db import FastJsonbLoader
from .outcomes import Outcome
from .worker.attempt import TIMED_OUT, Attempt, set_current
from .worker.runner import TaskRunner
from .worker.sources import JobSource, Source
from .worker.worker import WATCH_INTERVAL

#: psycopg's type oid of jsonb (Django's connections load it as text; ours as JSON).
JSONB_OID = 3802


class TooManyJobs(RuntimeError):
    """The drain ran ``max_jobs`` rows and work was still due (a task that re-enqueues itself?)."""


@dataclass
class RunReport:
    """What a drain ran: outcomes counted per source and state."""

    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)

    def count(self, status: str, source: str | None = None) -> int:
        """Outcomes in ``status`` of ``source`` ("jobs", "atomic", "deliveries");
        None counts jobs and atomic jobs together."""
        if source is None:
            return self.outcomes[("jobs", status)] + self.outcomes[("atomic", status)]
        return self.outcomes[(source, status)]

    @property
    def succeeded(self) -> int:
        return self.count("succeeded")

    @property
    def failed(self) -> int:
        """Job attempts that failed and were retried (each retry counts)."""
        return self.count("failed")

    @property
    def dead(self) -> int:
        return self.count("dead")

    @property
    def deliveries_succeeded(self) -> int:
        return self.count("succeeded", "deliveries")

    @property
    def total(self) -> int:
        return sum(self.outcomes.values())

    def merge(self, other: RunReport) -> None:
        self.outcomes.update(other.outcomes)


@contextmanager
def _json_loading(pg: Any) -> Iterator[None]:
    """Load jsonb as JSON on Django's connection for the drain, then as Django had it."""
    from psycopg.pq import Format

    previous = pg.adapters.get_loader(JSONB_OID, Format.TEXT)
    pg.adapters.register_loader("jsonb", FastJsonbLoader)
    try:
        yield
    finally:
        if previous is not None:
            pg.adapters.register_loader("jsonb", previous)


def _sources(webhooks: bool, worker_id: str) -> list[Source]:
    conf = get_settings()
    from .worker.atomic import AtomicJobSource

    sources: list[Source] = [
        JobSource(TaskRunner(worker_id, conf.UNKNOWN_TASK_DELAY, manage_connections=False)),
        AtomicJobSource(worker_id, manage_connections=False),
    ]
    if webhooks:
        from .webhooks.delivery_source import DeliverySource
        from .webhooks.relay_source import RelaySource

        sources.append(DeliverySource(worker_id))
        sources.append(RelaySource(worker_id))
    return sources


def _past_deadline(attempt: Attempt) -> bool:
    # The worker's watchdog gives an attempt up on this same condition.
    return attempt.deadline is not None and time.monotonic() >= attempt.deadline


def _watch(attempt: Attempt, done: threading.Event) -> None:
    while not done.wait(WATCH_INTERVAL):
        if _past_deadline(attempt):
            attempt.given_up = TIMED_OUT  # a cooperative task sees is_aborted()
            return


def _run_attempt(source: Source, item: Any) -> Outcome:
    """Run one row as a worker's task thread does, under an :class:`Attempt`.

    The runner gives the attempt the task's timeout; past it, the attempt is given up
    (a task that looks at ``context.is_aborted()`` stops) and recorded as timed out,
    whatever the task returned afterwards, as the worker records it. The task itself
    runs in this thread, on the test's connection, so it cannot be cut short: one that
    never looks runs to its end first.
    """
    attempt = Attempt(source, item)
    done = threading.Event()
    watcher = threading.Thread(target=_watch, args=(attempt, done), daemon=True)
    set_current(attempt)
    watcher.start()
    try:
        outcome = source.run(item)
    finally:
        done.set()
        watcher.join()
        set_current(None)
    if attempt.timeout is not None and (attempt.given_up == TIMED_OUT or _past_deadline(attempt)):
        return source.timed_out(item, attempt.timeout)
    return outcome


def run_queued_jobs(
    *,
    queues: Sequence[str] | None = None,
    webhooks: bool = False,
    retries: Literal["now", "wait"] = "now",
    max_jobs: int = 1000,
) -> RunReport:
    """Run every due job (and webhook delivery) until none is due; return what ran.

    * ``queues``: only these queue names (webhook deliveries are the queue
      ``"webhooks"``); default all.
    * ``webhooks=True``: send webhook deliveries too, for real, to their endpoints'
      URLs; by default they are left pending, so a test never POSTs to a receiver
      it did not mean to.
    * A task's ``timeout`` (or the backend's ``TIMEOUT``) applies as under a worker:
      an attempt that runs past it is recorded as a ``TaskTimeout`` failure.
    * ``retries="now"``: a failed attempt's retry is run at once instead of after
      its backoff, so each job ends succeeded or dead; ``"wait"`` leaves retries
      scheduled (not run by this call).
    * Deferred jobs (``run_after`` in the future) are not run.
    * ``max_jobs``: raise TooManyJobs after running this many rows, so a task that
      enqueues itself cannot loop forever.

    Runs in the calling thread on the queue database's Django connection, inside
    whatever transaction the caller (or the test case) has open.
    """
    conf = get_settings()
    if conf.QUEUES:
        # As a worker does when it starts (in the caller's transaction here).
        queue_settings.apply_settings()
    connection = connections[conf.DATABASE]
    worker_id = f"test-{uuid.uuid4().hex[:6]}"
    sources = _sources(webhooks, worker_id)
    params: dict[str, Any] = {
        "all_queues": not queues,
        "queues": list(queues or []),
        "lease": conf.LEASE_SECONDS,
        "worker_id": worker_id,
        "limit": 1,
    }
    report = RunReport()
    ran = 0
    while True:
        progressed = False
        for source in sources:
            # Fetched for each source: an atomic job whose transaction timed out
            # leaves Django to reconnect, and the old session is gone.
            connection.ensure_connection()
            pg = connection.connection
            with _json_loading(pg):
                if retries == "now":
                    source.retries_due_now(pg, params)
                items = source.claim(pg, params)
                for item in items:
                    if item.status == "dead":  # lapsed on its last attempt
                        report.outcomes[(source.name, "dead")] += 1
                        continue
                    if ran >= max_jobs:
                        raise TooManyJobs(
                            f"run_queued_jobs ran {max_jobs} rows and more are due; a task "
                            f"that enqueues itself? Raise max_jobs if this is expected."
                        )
                    outcome: Outcome = _run_attempt(source, item)
                    outcome.source = source.name
                    # Fetched again: an atomic job whose session ended reconnects.
                    connection.ensure_connection()
                    source.write_outcomes(connection.connection, [outcome])
                    label = "released" if outcome.refund else str(outcome.status)
                    report.outcomes[(source.name, label)] += 1
                    ran += 1
                    progressed = True
        if not progressed:
            return report


@contextmanager
def run_jobs(
    *,
    queues: Sequence[str] | None = None,
    webhooks: bool = False,
    retries: Literal["now", "wait"] = "now",
    max_jobs: int = 1000,
) -> Iterator[RunReport]:
    """Run the queue when the block ends (see :func:`run_queued_jobs`); yields the report.

    Nothing runs if the block raises.
    """
    report = RunReport()
    yield report
    report.merge(
        run_queued_jobs(queues=queues, webhooks=webhooks, retries=retries, max_jobs=max_jobs)
    )


try:  # The pytest fixture, when pytest is there (pytest_plugins = ["django_pgqueue.testing"]).
    import pytest
except ImportError:  # pragma: no cover - pytest is optional
    pass
else:

    @pytest.fixture
    def pgqueue_jobs(db: None) -> Any:
        """``pgqueue_jobs()`` runs the queue now and returns a RunReport.

        Needs pytest-django's database (``db``); jobs run in the test's transaction.
        """
        return run_queued_jobs
