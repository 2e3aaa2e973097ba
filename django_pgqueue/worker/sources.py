"""What a worker can claim: a *source* is one queue table plus how to run its rows.

Jobs (``JobSource``) and webhook deliveries (``webhooks.delivery_source.DeliverySource``)
share the claim loop, task threads, completer, lease keeper and shutdown logic of
``Worker``; a source only supplies how to run one row and which store writes its
rows (``jobs/store.py``, ``webhooks/store.py``): sources run no SQL of their own.
Every write a store makes for a claimed row is guarded by the row's claim token.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Protocol

from django.utils import timezone

from ..jobs import store
from ..jobs.rows import ClaimedJob
from ..models.queue import Status
from ..notify import WAKE_JOBS
from ..outcomes import JobOutcome, Outcome
from ..rollup import store as rollup_store
from .runner import TaskRunner


class Claimed(Protocol):
    """A claimed row: at least its id, claim token and post-claim status."""

    id: int
    token: uuid.UUID
    status: str


class Source(ABC):
    """Base class of a queue table a Worker claims from."""

    #: Short name, used in logs and to route outcomes.
    name: str = ""

    @abstractmethod
    def claim(self, conn: Any, params: dict[str, Any]) -> list[Any]:
        """Claim up to ``params['limit']`` rows (one statement); return Claimed objects."""

    @abstractmethod
    def any_due(self, conn: Any, params: dict[str, Any]) -> bool:
        """Whether anything is due now or held by any worker (for ``--burst``)."""

    def any_left(self, conn: Any, params: dict[str, Any]) -> bool:
        """Whether anything is waiting at all, due or not (for ``--until-empty``)."""
        return self.any_due(conn, params)

    def retries_due_now(self, conn: Any, params: dict[str, Any]) -> None:  # noqa: B027
        """Make scheduled retries due now (django_pgqueue.testing); optional, no-op here."""

    def upkeep(self, conn: Any, params: dict[str, Any], ahead: float) -> list[Any]:
        """The claims' periodic work, if due within ``ahead`` seconds, run by an idle
        worker (so that a woken claim need not); rows it ended are reported as a
        claim's. Optional: nothing here."""
        return []

    @abstractmethod
    def run(self, item: Any) -> Outcome:
        """Run one claimed row; never raises."""

    @abstractmethod
    def release(self, item: Any, reason: str) -> Outcome:
        """Give back a row that was not started (the attempt is refunded)."""

    @abstractmethod
    def interrupted(self, item: Any) -> Outcome:
        """A row still running when the shutdown grace ran out."""

    @abstractmethod
    def crashed(self, item: Any, exc: BaseException) -> Outcome:
        """A failed attempt for ``exc``, which escaped :meth:`run` or killed its thread.

        Must not raise: the worker's supervision records what this returns.
        """

    def timed_out(self, item: Any, seconds: float, stack: str = "") -> Outcome:
        """The attempt ran past its timeout of ``seconds`` (``stack``: where it was)."""
        from ..exceptions import TaskTimeout

        return self.crashed(item, TaskTimeout(f"did not finish within {seconds:g} s"))

    def aborted(self, item: Any, *, started: bool = True) -> Outcome:
        """An operator aborted the row (only sources whose lease statement reports it)."""
        from ..exceptions import TaskAborted

        return self.crashed(item, TaskAborted("aborted by an operator"))

    #: Called by :meth:`extend_leases` with ids whose abort was requested, when the
    #: source's table can say so (set by the Worker).
    on_abort: Callable[[str, list[int]], None] | None = None

    @abstractmethod
    def write_outcomes(self, conn: Any, batch: list[Any]) -> set[int]:
        """Write the source's outcomes (its own Outcome kind) guarded by token; return
        the ids that were written."""

    #: Whether the claim loop should claim again as soon as rows of this source are
    #: completed, rather than at the next poll. True when the source's claim can come
    #: back short although rows are due (per-endpoint limits of deliveries): a
    #: completion may have made room for them.
    claim_after_completion: bool = False

    #: Whether a timed-out attempt's own thread records what it came to. True for atomic
    #: jobs, whose transaction decides: at the deadline the worker gives the slot back
    #: and replaces the thread, but keeps the row held (its lease extended) while that
    #: thread lives, so nobody runs the job again meanwhile; when the task returns,
    #: its outcome is written once. False: the worker records the timeout itself and
    #: discards whatever the task returns later.
    timeout_settled_by_thread: bool = False

    @abstractmethod
    def read_outcomes(self, conn: Any, ids: list[int]) -> dict[int, tuple[str, uuid.UUID | None]]:
        """Current (status, locked_by) of rows, to settle an ambiguous commit."""

    @abstractmethod
    def extend_leases(
        self, conn: Any, ids: list[int], tokens: list[uuid.UUID], lease: float
    ) -> set[int]:
        """Extend leases guarded by token; return the ids still held."""

    def describe(self, item: Any) -> str:
        return str(getattr(item, "task_path", self.name))

    #: The stored trace contexts (W3C headers) of claimed rows, as ``(id, carrier)``
    #: pairs read over the claim's connection: ``trace_contexts(conn, ids)``. Set by
    #: sources whose rows carry the context of the span that created them; tracing.py
    #: calls it after each claim, and a run then continues that trace. None: the
    #: source's rows carry none.
    trace_contexts: Callable[[Any, list[int]], list[tuple[int, dict[str, str]]]] | None = None

    def unstorable(self, outcome: Any, reason: str, worker_id: str) -> Outcome:
        """What to write instead of ``outcome`` when PostgreSQL refused its values:
        here the same outcome with ``reason`` as its error (sources whose outcomes
        carry content of their own replace it)."""
        return dataclasses.replace(outcome, last_error=f"OutcomeNotStored: {reason}")


def tagged(item: ClaimedJob, outcome: JobOutcome) -> JobOutcome:
    """``outcome`` with its job's queue and wait, which the rollup counts it by, and
    whether the job is a workflow step (which completion statement it needs)."""
    outcome.queue_name = item.queue_name
    outcome.wait = item.wait
    outcome.step = item.step
    return outcome


class JobSource(Source):
    """Jobs of Django's Tasks framework (the ``pgqueue_job`` table, ``jobs/store.py``)."""

    name = WAKE_JOBS  # also the NOTIFY payload that wakes it (notify.py)

    def __init__(self, runner: TaskRunner) -> None:
        self.runner = runner

    def claim(self, conn: Any, params: dict[str, Any]) -> list[ClaimedJob]:
        return store.claim(conn, params)

    def upkeep(self, conn: Any, params: dict[str, Any], ahead: float) -> list[ClaimedJob]:
        # Shared by the atomic source: it runs at most once per interval per process.
        return store.upkeep(conn, params, ahead)

    def any_due(self, conn: Any, params: dict[str, Any]) -> bool:
        return store.any_due(conn, params)

    def any_left(self, conn: Any, params: dict[str, Any]) -> bool:
        return store.any_left(conn, params)

    def retries_due_now(self, conn: Any, params: dict[str, Any]) -> None:
        store.retries_due_now(conn, params)

    def trace_contexts(self, conn: Any, ids: list[int]) -> list[tuple[int, dict[str, str]]]:
        return store.read_trace_contexts(conn, ids)

    def run(self, item: ClaimedJob) -> JobOutcome:
        return tagged(item, self.runner.run(item))

    def release(self, item: ClaimedJob, reason: str) -> JobOutcome:
        return tagged(item, self.runner.release(item, reason))

    def interrupted(self, item: ClaimedJob) -> JobOutcome:
        return tagged(item, self.runner.interrupted(item))

    def crashed(self, item: ClaimedJob, exc: BaseException) -> JobOutcome:
        return tagged(item, self.runner.crashed(item, exc))

    def timed_out(self, item: ClaimedJob, seconds: float, stack: str = "") -> JobOutcome:
        return tagged(item, self.runner.timed_out(item, seconds, stack))

    def aborted(self, item: ClaimedJob, *, started: bool = True) -> JobOutcome:
        return tagged(item, self.runner.aborted(item, started=started))

    def read_outcomes(self, conn: Any, ids: list[int]) -> dict[int, tuple[str, uuid.UUID | None]]:
        return store.read_outcomes(conn, ids)

    def extend_leases(
        self, conn: Any, ids: list[int], tokens: list[uuid.UUID], lease: float
    ) -> set[int]:
        """As :meth:`Source.extend_leases`; also reports rows an operator asked to abort
        (the same statement returns the flag, so noticing an abort costs no query)."""
        held = store.extend_leases(conn, ids, tokens, lease)
        aborted = [job_id for job_id, abort in held if abort]
        if aborted and self.on_abort is not None:
            self.on_abort(self.name, aborted)
        return {job_id for job_id, _ in held}

    def write_outcomes(self, conn: Any, batch: list[JobOutcome]) -> set[int]:
        """Complete the batch and count it into the console's rollup, in the one
        statement of the completion: the counts commit exactly when it does."""
        return rollup_store.complete_counted_jobs(
            conn, batch, lambda counts: self.complete(conn, batch, counts)
        )

    def complete(
        self, conn: Any, batch: list[JobOutcome], counts: dict[str, str] | None = None
    ) -> set[int]:
        """Write the outcomes (and ``counts``, the batch's rollup rows, if every one
        was written); return the ids written (guarded by token)."""
        return store.complete(conn, batch, counts)

    def unstorable(self, outcome: JobOutcome, reason: str, worker_id: str) -> JobOutcome:
        """The attempt ran (or was released), so it is recorded, with ``reason`` and
        none of the refused content. A finished attempt becomes ``dead``: running
        it again would redo its work and most likely fail to store the same way;
        the admin's retry is there for a human decision. A release stays a release.
        """
        entry = {
            "attempt": outcome.attempt,
            "exception_class_path": "django_pgqueue.exceptions.OutcomeNotStored",
            "traceback": reason,
            "at": timezone.now().isoformat(),
            "worker_id": worker_id,
        }
        return dataclasses.replace(
            outcome,
            status=Status.PENDING if outcome.status == Status.PENDING else Status.DEAD,
            result_json=None,
            delay=0.0,
            error_json=json.dumps(entry),
            last_error=f"OutcomeNotStored: {reason}",
        )
