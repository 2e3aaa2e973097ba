"""Atomic jobs (``@task(atomic=True)``): claim, run and complete in one transaction.

The article our design follows names this the second way to run a Postgres
queue. One transaction on the queue database holds the claim (one row, ``FOR
UPDATE SKIP LOCKED``, no lease), the task body and the completion, so the task's
writes on that database and "succeeded" commit together; a crash rolls both back
and the row is simply claimable again. Database effects happen exactly once.

It plugs into the Worker as a :class:`~django_pgqueue.worker.sources.Source`
whose "claim" only counts due atomic jobs and hands out that many slots; each
slot, on a task thread, opens the transaction and claims its row there (on the
thread's Django connection, which the task's ORM calls use too). The completer
has nothing to write for a slot and no lease to extend.

A failed attempt rolls back its effects, then is recorded in a separate short
transaction (retry with backoff, or the dead-letter queue), as for other tasks.
Limits (docs/atomic-tasks.md): the transaction is bounded by
``PGQUEUE["ATOMIC_TIMEOUT_SECONDS"]``; only writes on the queue's database are
covered; HTTP and other outside effects stay at-least-once; a long transaction
holds back vacuum; a task that kills its worker does not use up attempts.
"""

from __future__ import annotations

import itertools
import json
import logging
import traceback
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import close_old_connections, connections, transaction

from ..backend import _json
from ..conf import get_settings
from ..db import is_connection_error
from ..jobs import store
from ..jobs.rows import ClaimedJob
from ..models.queue import Status
from ..outcomes import JobOutcome
from ..storable import make_outcome_storable
from .runner import TaskRunner, _error_entry, _exception_path
from .sources import Source

logger = logging.getLogger("django_pgqueue.worker")

#: The state a slot reports when another worker took the job first.
SKIPPED = "skipped"

#: Seconds before an attempt whose transaction failed outside the task is retried.
TRANSACTION_RETRY_DELAY = 1.0


@dataclass(slots=True)
class AtomicSlot:
    """Permission to claim one atomic job on a task thread (not a row yet)."""

    id: int
    token: uuid.UUID
    status: str = Status.PENDING
    task_path: str = "atomic"


class AtomicJobSource(Source):
    """Atomic jobs of the ``pgqueue_job`` table (``atomic = true``)."""

    name = "atomic"

    def __init__(self, worker_id: str, *, manage_connections: bool = True) -> None:
        conf = get_settings()
        self.worker_id = worker_id
        #: False on the caller's own connection (django_pgqueue.testing), as TaskRunner's.
        self.manage_connections = manage_connections
        # The runner must not close connections: the task runs inside our transaction.
        self.runner = TaskRunner(worker_id, conf.UNKNOWN_TASK_DELAY, manage_connections=False)
        self._ids = itertools.count(1)
        self._params: dict[str, Any] = {}

    # -- claiming (slots) ------------------------------------------------------------

    def claim(self, conn: Any, params: dict[str, Any]) -> list[AtomicSlot]:
        due = store.atomic_due(conn, params)
        self._params = {k: params[k] for k in ("all_queues", "queues")}
        return [AtomicSlot(next(self._ids), uuid.uuid4()) for _ in range(due)]

    def any_due(self, conn: Any, params: dict[str, Any]) -> bool:
        return bool(store.atomic_due(conn, {**params, "limit": 1}))

    def any_left(self, conn: Any, params: dict[str, Any]) -> bool:
        return store.any_atomic_left(conn, params)

    def retries_due_now(self, conn: Any, params: dict[str, Any]) -> None:
        store.retries_due_now(conn, params)  # atomic rows are job rows

    # -- running -----------------------------------------------------------------------

    def run(self, item: AtomicSlot) -> JobOutcome:
        """Claim one atomic job, run it and complete it in one transaction. Never raises."""
        conf = get_settings()
        db = conf.DATABASE
        if self.manage_connections:
            close_old_connections()
        job: ClaimedJob | None = None
        outcome: JobOutcome | None = None
        try:
            with transaction.atomic(using=db):
                with connections[db].cursor() as cursor:
                    row = store.claim_atomic(
                        cursor,
                        {**self._params, "worker_id": self.worker_id},
                        int(conf.ATOMIC_TIMEOUT_SECONDS * 1000),
                    )
                if row is None:
                    return self._skipped(item)
                job = claimed(row)
                outcome = self.runner.run(job)
                if outcome.status == Status.SUCCEEDED:
                    with connections[db].cursor() as cursor:
                        store.complete_atomic(cursor, job.id, job.token, outcome.result_json)
                else:
                    # The effects go; the attempt is recorded below, after the rollback.
                    transaction.set_rollback(True, using=db)
        except Exception as exc:
            if job is None:
                logger.exception("Atomic claim failed; the job stays claimable")
                self._after_error(db, exc)
                return self._skipped(item)
            # The commit (or the task's session) failed: nothing of it stayed.
            logger.warning("Atomic job %s: transaction failed (%s); rolled back", job.id, exc)
            self._after_error(db, exc)
            outcome = self._transaction_failed(job, exc)
        finally:
            if self.manage_connections:
                close_old_connections()
        assert job is not None and outcome is not None
        if outcome.status != Status.SUCCEEDED:
            self._record_failure(db, job, outcome)
        outcome.id, outcome.token = item.id, item.token  # routed back as the slot
        outcome.atomic_job_id = job.id
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

    def _record_failure(self, db: str, job: ClaimedJob, outcome: JobOutcome) -> None:
        """Write the failed attempt in its own short transaction (autocommit)."""
        # As the completer does for other jobs: a task's error text may hold NUL or
        # lone surrogates, which PostgreSQL refuses; refused here, the attempt would
        # be retried at once for ever.
        make_outcome_storable(outcome)
        try:
            with connections[db].cursor() as cursor:
                store.record_atomic_failure(cursor, job, outcome, self.worker_id)
        except Exception as exc:
            # Nothing was counted: the job is claimable again and retried at once.
            logger.warning("Atomic job %s: could not record the failed attempt (%s)", job.id, exc)
            self._after_error(db, exc)

    @staticmethod
    def _skipped(item: AtomicSlot) -> JobOutcome:
        return JobOutcome(item.id, item.token, SKIPPED, task_path="atomic")

    def release(self, item: AtomicSlot, reason: str) -> JobOutcome:
        return self._skipped(item)  # a slot holds no row

    def interrupted(self, item: AtomicSlot) -> JobOutcome:
        # The thread is still inside the transaction; it rolls back when the process ends.
        return self._skipped(item)

    def crashed(self, item: AtomicSlot, exc: BaseException) -> JobOutcome:
        # Whatever escaped ended the slot's transaction with a rollback: its job, if it
        # had claimed one, is claimable again with nothing of the attempt kept. (What a
        # task raises never gets here: the runner records it as a failed attempt.)
        logger.error(
            "Atomic slot ended by %s: %s; its transaction rolled back", type(exc).__name__, exc
        )
        return self._skipped(item)

    def describe(self, item: AtomicSlot) -> str:
        return "atomic slot"

    # -- nothing to complete or extend: the transaction did it -----------------------------

    def write_outcomes(self, conn: Any, batch: list[JobOutcome]) -> set[int]:
        return {outcome.id for outcome in batch}

    def extend_leases(
        self, conn: Any, ids: list[int], tokens: list[uuid.UUID], lease: float
    ) -> set[int]:
        return set(ids)

    def read_outcomes(self, conn: Any, ids: list[int]) -> dict[int, tuple[str, uuid.UUID | None]]:
        return {}


def claimed(row: tuple[Any, ...]) -> ClaimedJob:
    """A ClaimedJob from a Django cursor's row (which hands jsonb back as text)."""
    job = ClaimedJob.from_row(row)
    job.args, job.kwargs = _json(job.args), _json(job.kwargs)
    job.errors, job.worker_ids = _json(job.errors) or [], _json(job.worker_ids) or []
    return job
