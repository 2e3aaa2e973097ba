"""Atomic jobs (``@task(atomic=True)``): the task's writes and its success in one transaction.

The article our design follows names this the second way to run a Postgres
queue. Here an attempt counts itself before its body runs, and only the body
and the success share a transaction:

1. the claim (``sql.CLAIM_ATOMIC_JOBS``, on the worker's claim connection, in a
   batch like any claim) counts the attempt and takes a fenced lease, and
   commits;
2. on a task thread, one transaction on the queue database holds the task's
   writes (on the thread's Django connection, which the task's ORM calls use)
   and the success, guarded by the claim token, and commits them together.

A task's database effects therefore commit exactly once, with "succeeded". A
body that raises, a transaction that fails or times out, a worker killed
mid-task: each rolls back the task's writes and nothing else. The attempt stays
counted and the row stays held (in_progress, leased) until its failure is written
(by the completer, guarded by the token, as for every job) or, after a crash,
until the lease lapses and the next claim counts the lapse, so no other thread
or worker can run a failed body again before its failure is recorded, and
``max_attempts`` holds exactly.

A hung body cannot outlive its transaction's bound,
``PGQUEUE["ATOMIC_TIMEOUT_SECONDS"]``, so neither does its attempt: the worker
gives its slot back at the deadline (the task's own timeout, if shorter), as
for leased tasks, but keeps the row held while the thread lives; whatever the
thread finally returns is recorded, once (``Source.timeout_settled_by_thread``).
Limits (docs/atomic-tasks.md): only writes on the queue's database are covered;
HTTP and other outside effects stay at-least-once; a long transaction holds back
vacuum.
"""

from __future__ import annotations

import json
import logging
import traceback
from typing import Any

from django.db import close_old_connections, connections, transaction

from ..conf import get_settings
from ..db import is_connection_error
from ..jobs import store
from ..jobs.rows import ClaimedJob
from ..models.queue import Status
from ..notify import WAKE_ATOMIC
from ..outcomes import JobOutcome
from ..rollup import store as rollup_store
from .attempt import current_attempt
from .runner import TaskRunner, _error_entry, _exception_path
from .sources import JobSource, tagged

logger = logging.getLogger("django_pgqueue.worker")

#: Seconds before an attempt whose transaction failed outside the task is retried.
TRANSACTION_RETRY_DELAY = 1.0


class AtomicJobSource(JobSource):
    """Atomic jobs of the ``pgqueue_job`` table (``atomic = true``).

    Claimed, leased, extended, released and failed exactly as the other jobs
    (``JobSource``); only running differs: the body and the success share one
    transaction, so a success is written by the time :meth:`run` returns.
    """

    name = WAKE_ATOMIC  # also the NOTIFY payload that wakes it (notify.py)
    timeout_settled_by_thread = True

    def __init__(self, worker_id: str, *, manage_connections: bool = True) -> None:
        conf = get_settings()
        # The runner must not close connections: the task runs inside our transaction.
        super().__init__(TaskRunner(worker_id, conf.UNKNOWN_TASK_DELAY, manage_connections=False))
        self.worker_id = worker_id
        #: False on the caller's own connection (django_pgqueue.testing), as TaskRunner's.
        self.manage_connections = manage_connections

    def claim(self, conn: Any, params: dict[str, Any]) -> list[ClaimedJob]:
        return store.claim_atomic(conn, params)

    def any_due(self, conn: Any, params: dict[str, Any]) -> bool:
        # Held atomic rows are in the jobs' check (ANY_DUE counts every held job).
        return bool(store.atomic_due(conn, {**params, "limit": 1}))

    def any_left(self, conn: Any, params: dict[str, Any]) -> bool:
        return store.any_atomic_left(conn, params)

    # -- running -----------------------------------------------------------------------

    def run(self, item: ClaimedJob) -> JobOutcome:
        """Run the body and record a success in one transaction. Never raises."""
        return tagged(item, self._run_atomic(item))

    def _run_atomic(self, item: ClaimedJob) -> JobOutcome:
        """The body and its success's record, in one transaction.

        A success comes back ``committed``; anything else is for the completer to
        write, guarded by the claim token like any job's outcome.
        """
        conf = get_settings()
        db = conf.DATABASE
        attempt = current_attempt()
        if attempt is not None:
            # The transaction ends at this bound whatever the task does; so does the
            # attempt (the task's own timeout, if shorter, wins in the runner).
            attempt.limit_to(conf.ATOMIC_TIMEOUT_SECONDS)
        if self.manage_connections:
            close_old_connections()
        outcome: JobOutcome | None = None
        try:
            with transaction.atomic(using=db):
                with connections[db].cursor() as cursor:
                    store.bound_atomic_transaction(cursor, int(conf.ATOMIC_TIMEOUT_SECONDS * 1000))
                outcome = self.runner.run(item)
                if outcome.status != Status.SUCCEEDED:
                    # The effects go; the attempt, counted at claim, is written after.
                    transaction.set_rollback(True, using=db)
                else:
                    with connections[db].cursor() as cursor:
                        held = store.complete_atomic(
                            cursor, item.id, item.token, outcome.result_json
                        )
                    if held:
                        outcome.committed = True  # unless the COMMIT fails (below)
                    else:
                        # Given up or re-claimed meanwhile: none of it may commit. The
                        # completer's write of this outcome is fenced out the same way.
                        logger.warning(
                            "atomic %s %s: the attempt no longer holds its job; its "
                            "writes are rolled back",
                            item.id,
                            item.task_path,
                        )
                        transaction.set_rollback(True, using=db)
        except Exception as exc:
            self._after_error(db, exc)
            if outcome is None or outcome.status == Status.SUCCEEDED:
                # The session or the commit failed: nothing of the body stayed.
                logger.warning(
                    "atomic %s %s: transaction failed (%s); rolled back",
                    item.id,
                    item.task_path,
                    exc,
                )
                outcome = self._transaction_failed(item, exc)
            # else: the body failed and the rollback found the session gone; the
            # body's own failure is what to record.
        finally:
            if self.manage_connections:
                close_old_connections()
        return outcome

    def _transaction_failed(self, job: ClaimedJob, exc: BaseException) -> JobOutcome:
        """An attempt whose transaction failed outside the task (connection lost, commit
        refused, timeout): rolled back whole, retried after TRANSACTION_RETRY_DELAY."""
        status = Status.DEAD if job.attempts >= job.max_attempts else Status.FAILED
        path = _exception_path(exc)
        entry = _error_entry(job, self.worker_id, path, "".join(traceback.format_exception(exc)))
        return JobOutcome(
            job.id,
            job.token,
            status,
            delay=TRANSACTION_RETRY_DELAY,
            error_json=json.dumps(entry),
            last_error=f"{type(exc).__name__}: {exc}"[:2000],
            task_path=job.task_path,
            attempt=job.attempts,
        )

    @staticmethod
    def _after_error(db: str, exc: BaseException) -> None:
        if is_connection_error(getattr(exc, "__cause__", None) or exc):
            connections[db].close()

    def complete(
        self, conn: Any, batch: list[JobOutcome], counts: dict[str, str] | None = None
    ) -> set[int]:
        """Successes committed with their body are written already; the rest as jobs'.
        (``counts`` cover both: written with the rest, or alone when there is none.)"""
        done = {outcome.id for outcome in batch if outcome.committed}
        rest = [outcome for outcome in batch if not outcome.committed]
        if rest:
            return done | super().complete(conn, rest, counts)
        if counts is not None:
            rollup_store.add(conn, counts)
        return done
