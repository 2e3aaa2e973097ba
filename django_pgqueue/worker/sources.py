"""What a worker can claim: a *source* is one queue table plus how to run its rows.

Jobs (``JobSource``) and webhook deliveries (``webhooks.worker.DeliverySource``)
share the claim loop, task threads, completer, lease keeper and shutdown logic of
``Worker``; a source only supplies its SQL and how to run one row. Every write a
source makes for a claimed row must be guarded by the row's claim token.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Protocol

from django.utils import timezone

from .. import sql
from ..models.queue import Status
from .runner import ClaimedJob, Outcome, TaskRunner


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
    def write_outcomes(self, conn: Any, batch: list[Outcome]) -> set[int]:
        """Write outcomes guarded by token; return the ids that were written."""

    #: Whether the claim loop should claim again as soon as rows of this source are
    #: completed, rather than at the next poll. True when the source's claim can come
    #: back short although rows are due (per-endpoint limits of deliveries): a
    #: completion may have made room for them.
    claim_after_completion: bool = False

    #: The source's READ_OUTCOMES and EXTEND_LEASES statements (see sql/fragments.py).
    read_outcomes_sql: str = ""
    extend_leases_sql: str = ""

    def read_outcomes(self, conn: Any, ids: list[int]) -> dict[int, tuple[str, uuid.UUID | None]]:
        """Current (status, locked_by) of rows, to settle an ambiguous commit."""
        rows = conn.execute(self.read_outcomes_sql, {"ids": ids}).fetchall()
        return {row[0]: (row[1], row[2]) for row in rows}

    def extend_leases(
        self, conn: Any, ids: list[int], tokens: list[uuid.UUID], lease: float
    ) -> set[int]:
        """Extend leases guarded by token; return the ids still held."""
        return {row[0] for row in self._extend(conn, ids, tokens, lease)}

    def _extend(
        self, conn: Any, ids: list[int], tokens: list[uuid.UUID], lease: float
    ) -> list[tuple[Any, ...]]:
        # Array literals, as in write_outcomes: every held row is in this statement,
        # and psycopg's list dumper adapted each id and token one by one.
        params = {
            "lease": lease,
            "ids": array_literal([str(i) for i in ids]),
            "tokens": array_literal([str(t) for t in tokens]),
        }
        return conn.execute(self.extend_leases_sql, params).fetchall()

    def describe(self, item: Any) -> str:
        return str(getattr(item, "task_path", self.name))

    def unstorable(self, outcome: Outcome, reason: str, worker_id: str) -> Outcome:
        """What to write instead of ``outcome`` when PostgreSQL refused its values.

        The attempt ran (or was released), so it is recorded, with ``reason`` and
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


class JobSource(Source):
    """Jobs of Django's Tasks framework (the ``pgqueue_job`` table)."""

    name = "jobs"
    read_outcomes_sql = sql.READ_OUTCOMES
    extend_leases_sql = sql.EXTEND_JOB_LEASES

    def __init__(self, runner: TaskRunner) -> None:
        self.runner = runner

    def claim(self, conn: Any, params: dict[str, Any]) -> list[ClaimedJob]:
        rows = conn.execute(sql.CLAIM_JOBS, params).fetchall()
        return [ClaimedJob.from_row(r) for r in rows]

    def any_due(self, conn: Any, params: dict[str, Any]) -> bool:
        return bool(conn.execute(sql.ANY_DUE, params).fetchone()[0])

    def any_left(self, conn: Any, params: dict[str, Any]) -> bool:
        return bool(conn.execute(sql.ANY_LEFT, params).fetchone()[0])

    def retries_due_now(self, conn: Any, params: dict[str, Any]) -> None:
        conn.execute(sql.RETRIES_DUE_NOW, params)

    def run(self, item: ClaimedJob) -> Outcome:
        return self.runner.run(item)

    def release(self, item: ClaimedJob, reason: str) -> Outcome:
        return self.runner.release(item, reason)

    def interrupted(self, item: ClaimedJob) -> Outcome:
        return self.runner.interrupted(item)

    def crashed(self, item: ClaimedJob, exc: BaseException) -> Outcome:
        return self.runner.crashed(item, exc)

    def timed_out(self, item: ClaimedJob, seconds: float, stack: str = "") -> Outcome:
        return self.runner.timed_out(item, seconds, stack)

    def aborted(self, item: ClaimedJob, *, started: bool = True) -> Outcome:
        return self.runner.aborted(item, started=started)

    def extend_leases(
        self, conn: Any, ids: list[int], tokens: list[uuid.UUID], lease: float
    ) -> set[int]:
        """As :meth:`Source.extend_leases`; also reports rows an operator asked to abort
        (the same statement returns the flag, so noticing an abort costs no query)."""
        rows = self._extend(conn, ids, tokens, lease)
        aborted = [row[0] for row in rows if row[1]]
        if aborted and self.on_abort is not None:
            self.on_abort(self.name, aborted)
        return {row[0] for row in rows}

    def write_outcomes(self, conn: Any, batch: list[Outcome]) -> set[int]:
        # The arrays go as PostgreSQL array literals (text, cast by the statement):
        # psycopg's generic list dumper adapts element by element and took the
        # largest share of the completer's time in a drain of short tasks.
        params = {
            "ids": array_literal([str(o.job_id) for o in batch]),
            "tokens": array_literal([str(o.token) for o in batch]),
            "statuses": array_literal([str(o.status) for o in batch]),
            "results": text_array_literal([o.result_json for o in batch]),
            "delays": array_literal([repr(float(o.delay)) for o in batch]),
            "errors": text_array_literal([o.error_json for o in batch]),
            "last_errors": text_array_literal([o.last_error for o in batch]),
            "refunds": array_literal([str(int(o.refund)) for o in batch]),
        }
        return {row[0] for row in conn.execute(sql.COMPLETE_JOBS, params).fetchall()}


def array_literal(items: list[str]) -> str:
    """``{a,b,c}`` for elements that need no quoting (numbers, uuids, state names)."""
    return "{" + ",".join(items) + "}"


def text_array_literal(items: list[str | None]) -> str:
    """A ``text[]`` literal: every element double-quoted with ``\\`` and ``"`` escaped,
    ``None`` as an unquoted NULL."""
    return (
        "{"
        + ",".join(
            "NULL" if item is None else '"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"'
            for item in items
        )
        + "}"
    )
