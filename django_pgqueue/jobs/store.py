"""The job store: the one writer of ``pgqueue_job`` rows, from birth to the worker's
last write, and the reads that decide them.

* Birth: ``insert`` (one job, in the caller's transaction), ``insert_keyed``
  (unique and atomic jobs, settled by the partial unique index) and
  ``insert_many`` (one statement, COPY for large batches). ``backend.py``, the
  Tasks boundary, checks and serialises the call and hands the columns here.
* The worker's claim, completion and leases (``worker/sources.JobSource``,
  ``worker/atomic``), which run no SQL themselves.
* A running task's progress (``set_progress``, throttled by ``worker/attempt.py``).
* Reads: ``read`` for ``get_result`` and the HTTP API's ``GET /jobs/{id}`` (live,
  else history), the due/left questions of ``--burst`` and
  ``--until-empty``, the trace contexts (tracing.py).

Operator actions (cancel, retry, replay, abort) are ``operations.py``'s and
retention is ``maintenance.py``'s (docs/architecture.md lists every writer).
The statements are in ``sql/jobs.py`` with why each is shaped so; rows come back
decoded by column name (``jobs/rows.py``). Functions taking ``conn`` run on one
of the worker's own autocommit psycopg connections; the atomic ones take a
Django cursor inside the transaction that holds the job.

Every write to a claimed row is guarded by its claim token (``locked_by``): a
worker whose lease lapsed and whose row was taken by another changes nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

from django.db import connections, transaction
from psycopg.types.string import TextLoader

from .. import bulk, sql
from ..conf import get_settings
from ..db import array_literal, execute_one, run_lease_extension, text_array_literal
from ..exceptions import DuplicateJob
from ..outcomes import JobOutcome
from ..scan_floor import ScanFloor
from .rows import CLAIMED_JOB, JOB_ROW, ClaimedJob, JobRow

logger = logging.getLogger("django_pgqueue.jobs")

#: Bulk enqueues of at least this many rows go through COPY instead of INSERT.
COPY_THRESHOLD = 2000

#: The order of the values ``insert`` passes: the placeholders of
#: ``sql.NEW_JOB_COLUMNS``, checked here so that list stays the only declaration.
_INSERT_VALUES = (
    "priority",
    "max_attempts",
    "next_attempt_at",
    "task_path",
    "queue_name",
    "flow_controlled",
    "backend",
    "args",
    "kwargs",
)
if sql.NEW_JOB_PARAMETERS != _INSERT_VALUES:  # pragma: no cover - a mistake in sql/jobs.py
    raise ImportError(
        f"sql.NEW_JOB_COLUMNS takes {sql.NEW_JOB_PARAMETERS} as parameters; "
        f"jobs/store.py passes {_INSERT_VALUES}"
    )

# -- birth: enqueue ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class NewJobs:
    """The columns a call sets on the jobs it enqueues, the same for every job of one
    ``enqueue_many`` (the arguments differ per job and come apart)."""

    priority: int
    max_attempts: int
    run_after: dt.datetime | None
    task_path: str
    queue_name: str
    backend: str

    def values(self, args_json: Any, kwargs_json: Any) -> list[Any]:
        """INSERT_JOB's parameters (``_INSERT_VALUES``) for one job with these arguments
        (INSERT_JOBS: the arrays of every job's arguments)."""
        return [
            self.priority,
            self.max_attempts,
            self.run_after,
            self.task_path,
            self.queue_name,
            self.queue_name,  # flow_controlled: whether this queue has a row
            self.backend,
            args_json,
            kwargs_json,
        ]


def insert(
    db: str, new: NewJobs, args_json: str, kwargs_json: str, *, prepare: bool
) -> tuple[int, dt.datetime]:
    """Write one job in the caller's transaction; return its id and ``created_at``.

    Server-side bound (``db.execute_one``): for a one-row enqueue parsing and
    planning the statement again was a large share of the whole cost.
    """
    row = execute_one(
        connections[db], sql.INSERT_JOB, new.values(args_json, kwargs_json), prepare=prepare
    )
    return row[0], row[1]


def insert_keyed(
    db: str,
    new: NewJobs,
    args_json: str,
    kwargs_json: str,
    *,
    unique_key: str | None,
    atomic: bool,
    concurrency_key: str | None = None,
) -> tuple[int, dt.datetime | None]:
    """Write a unique, atomic or keyed job, unless a live job holds its unique key.

    Returns the new job's id and ``created_at``, or the id of the live job holding
    ``unique_key`` and None. The partial unique index settles concurrent enqueues
    of one key: the INSERT of the second waits for the first transaction and then
    inserts nothing (``ON CONFLICT DO NOTHING``). Only then is the live job read,
    by a statement with a fresh snapshot. If that job finished in between, nothing
    is live any more and the insert is tried again.
    """
    values = [*new.values(args_json, kwargs_json), unique_key, atomic, concurrency_key]
    connection = connections[db]
    for _ in range(5):
        with transaction.atomic(using=db), connection.cursor() as cursor:
            cursor.execute(sql.INSERT_KEYED_JOB, values)
            row = cursor.fetchone()
            if row is not None:
                return row[0], row[1]
            cursor.execute(sql.LIVE_JOB_WITH_KEY, [new.task_path, unique_key])
            live = cursor.fetchone()
        if live is not None:
            return live[0], None
        # it finished meanwhile: the key is free again
    raise DuplicateJob(  # pragma: no cover - needs five finishes in a row
        f"{new.task_path}: the job holding unique key {unique_key!r} kept changing",
        job_id=None,
    )


def insert_many(db: str, new: NewJobs, runs: Sequence[bulk.Run]) -> tuple[list[int], dt.datetime]:
    """Write every call of ``runs`` as a job of one task, all or none, in the caller's
    transaction; return the ids in call order and the batch's ``created_at``.

    Ids are drawn first (``sql.RESERVE_JOB_IDS``: INSERT ... RETURNING promises no
    order), then the rows go in one INSERT, or through COPY from
    ``COPY_THRESHOLD`` rows on (several times faster).
    """
    count = bulk.count_of(runs)
    with transaction.atomic(using=db), connections[db].cursor() as cursor:
        cursor.execute(sql.RESERVE_JOB_IDS, [count, new.queue_name])
        ids, created_at, marked = cursor.fetchone()
        if count >= COPY_THRESHOLD:
            shared = sql.copy_tail(
                {
                    "flow_controlled": "t" if marked else "f",
                    "priority": new.priority,
                    "max_attempts": new.max_attempts,
                    "next_attempt_at": (new.run_after or created_at).isoformat(),
                    "created_at": created_at.isoformat(),
                    "updated_at": created_at.isoformat(),
                    "task_path": new.task_path,
                    "queue_name": new.queue_name,
                    "backend": new.backend,
                }
            )
            with cursor.cursor.copy(sql.COPY_JOBS) as copy:  # Django's psycopg cursor
                for chunk in bulk.copy_chunks(ids, runs, shared):
                    copy.write(chunk)
        else:
            # INSERT_JOB's parameters with the ids and per-row arguments as arrays.
            args_json, kwargs_json = bulk.insert_arrays(runs)
            values = new.values(args_json, kwargs_json)
            cursor.execute(sql.INSERT_JOBS, [*values[:-2], ids, *values[-2:]])
    return ids, created_at


@dataclasses.dataclass(frozen=True, slots=True)
class NewStep:
    """One workflow step to write (``workflows/``): the job's columns, its name, what a
    parent's failure does to it, and how many parents it waits for."""

    new: NewJobs
    args_json: str
    kwargs_json: str
    name: str = ""
    policy: str = "cancel"
    parents: int = 0
    atomic: bool = False
    concurrency_key: str | None = None


def mark_queue_jobs(cursor: Any, names: Sequence[str]) -> None:
    """Mark the waiting jobs of queues that just got their row (``queues``, in its
    transaction): the flow claim takes them from now on (``sql.MARK_QUEUE_JOBS``)."""
    cursor.execute(sql.MARK_QUEUE_JOBS, {"names": list(names)})


def unmark_queue_jobs(cursor: Any, names: Sequence[str]) -> None:
    """Clear the marks of queues whose row went: the plain claim takes their jobs."""
    cursor.execute(sql.UNMARK_QUEUE_JOBS, {"names": list(names)})


def reserve_ids(db: str, count: int) -> list[int]:
    """Draw ``count`` job ids, in order (a workflow's edges name its steps' ids)."""
    with connections[db].cursor() as cursor:
        cursor.execute(sql.RESERVE_JOB_IDS, [count, None])
        return list(cursor.fetchone()[0])


def insert_steps(db: str, workflow_id: int, ids: Sequence[int], steps: Sequence[NewStep]) -> None:
    """Write every step of a workflow in one statement, in the caller's transaction:
    ``waiting`` when it has parents (released by the completion of the last one),
    else ``pending``."""
    columns: dict[str, list[Any]] = {
        "id": list(ids),
        "status": ["waiting" if s.parents else "pending" for s in steps],
        "priority": [s.new.priority for s in steps],
        "max_attempts": [s.new.max_attempts for s in steps],
        "next_attempt_at": [s.new.run_after for s in steps],
        "task_path": [s.new.task_path for s in steps],
        "queue_name": [s.new.queue_name for s in steps],
        "flow_controlled": [s.new.queue_name for s in steps],
        "backend": [s.new.backend for s in steps],
        "args": [s.args_json for s in steps],
        "kwargs": [s.kwargs_json for s in steps],
        "atomic": [s.atomic for s in steps],
        "concurrency_key": [s.concurrency_key for s in steps],
        "step_name": [s.name for s in steps],
        "step_policy": [s.policy for s in steps],
        "pending_parents": [s.parents for s in steps],
    }
    if tuple(columns) != sql.STEP_COLUMNS:  # pragma: no cover - a mistake in sql/jobs.py
        raise RuntimeError(
            f"sql.STEP_COLUMNS is {sql.STEP_COLUMNS}, the store gives {tuple(columns)}"
        )
    with connections[db].cursor() as cursor:
        cursor.execute(sql.INSERT_STEP_JOBS, {**columns, "workflow_id": workflow_id})


def cancel_workflow_steps(db: str, workflow_id: int) -> list[tuple[int, str]]:
    """Cancel the steps of a workflow that have not ended (a running one is asked to
    abort); return each changed step with the state it left."""
    with connections[db].cursor() as cursor:
        cursor.execute(sql.CANCEL_WORKFLOW_STEPS, {"workflow_id": workflow_id})
        return [(row[0], row[1]) for row in cursor.fetchall()]


def read(db: str, job_id: int) -> JobRow | None:
    """One job as ``get_result`` reports it, or None when there is no such job.

    A finished job moved to history (history.py) is read from there: one
    statement reads the live table, then history only when the job is not live.
    JSON columns come back as text, whatever the connection loads jsonb as: a task
    reading a result inside ``run_queued_jobs`` (which loads jsonb as JSON on the
    same connection) must decode it as every other caller does.
    """
    with connections[db].cursor() as cursor:
        cursor.cursor.adapters.register_loader("jsonb", TextLoader)  # this cursor only
        cursor.execute(sql.GET_JOB_OR_HISTORY, [job_id, job_id])
        row = cursor.fetchone()
    return None if row is None else JOB_ROW.one(row)


# -- the worker's claim, completion and leases -------------------------------------


def claim(conn: Any, params: dict[str, Any]) -> list[ClaimedJob]:
    """Claim up to ``params['limit']`` due or lapsed jobs of the selected queues.

    Rows come back ``in_progress`` with a fresh token, or ``dead``/``cancelled``
    (a lapsed row out of attempts or aborted, finished by the claim itself, or by
    :func:`end_lapsed_steps` for a workflow step).
    """
    return _claim_with_flow(conn, params, sql.CLAIM_FLOW_JOBS, sql.CLAIM_JOBS)


#: When the store last asked whether any queue has a row, and the answer.
_configured = {"at": -1e9, "any": False}
#: When this process last ended the workflow steps whose lease lapsed for good.
_steps_ended = {"at": -1e9}
#: How often a claim first ends those steps (``end_lapsed_steps``): a lapsed step
#: out of attempts waits at most this long after its lease for its children to be
#: released or cancelled.
LAPSED_STEPS_EVERY = 1.0
#: How long that answer is trusted: a queue configured for the first time waits at
#: most this long for the flow claim (the plain claim skips its jobs at once).
CONFIGURED_TTL = 1.0


def forget_configured() -> None:
    """Ask again at the next claim whether any queue has a row (``queues`` calls it
    after each write, so this process's next claim sees a first configuration)."""
    _configured["at"] = -1e9


def _above_floor(conn: Any, params: dict[str, Any], statement: str) -> list[ClaimedJob]:
    """Run ``statement`` (a plain claim, or END_LAPSED_STEPS) above the claim loop's
    scan floor, if it passed one."""
    floors: ScanFloor | None = params.get("scan_floor")
    started = time.monotonic()
    floor = None if floors is None else floors.age(statement, started)
    rows = conn.execute(statement, {**params, "floor": floor}).fetchall()
    if floors is not None:
        floors.record(statement, started, time.monotonic(), floor, len(rows) < params["limit"])
    return CLAIMED_JOB.all(rows)


def _claim_with_flow(conn: Any, params: dict[str, Any], flow: str, plain: str) -> list[ClaimedJob]:
    """The flow claim (configured queues, under their limits) when any queue has a
    row, then the plain claim for the rest of the batch.

    With no queue configured (the common case) this is the plain claim alone,
    today's statement, plus one tiny query a second: the flow claim's planning
    would otherwise cost every claim. The plain claim reads the queue rows itself
    and never takes a configured queue's job, so a pause or a limit never waits for
    this answer; only a newly configured queue waits up to CONFIGURED_TTL to be
    served by the flow claim.

    First, when it is due, the claims' :func:`upkeep`; the rows it ended come first
    and do not count against the limit, as none of them runs.
    """
    taken = upkeep(conn, params)
    try:
        if _configured["any"]:
            claimed = CLAIMED_JOB.all(conn.execute(flow, params).fetchall())
            taken += claimed
            if len(claimed) >= params["limit"]:
                return taken
            params = {**params, "limit": params["limit"] - len(claimed)}
        return taken + _above_floor(conn, params, plain)
    except Exception as exc:
        if not taken:
            raise
        # What the statements before took is committed: hand it over, or those jobs
        # would wait for their leases to lapse and come back with an attempt more.
        # This claim's failure is met again by the next claim, which reconnects.
        logger.warning("Claim of jobs failed after %d were claimed (%s)", len(taken), exc)
        return taken


def upkeep(conn: Any, params: dict[str, Any], ahead: float = 0.0) -> list[ClaimedJob]:
    """The claims' periodic work, each part only when it is due: at most once a
    second, end the workflow steps whose lease lapsed for good
    (:func:`end_lapsed_steps`, which the claims leave alone so that they carry no
    release), and ask again whether any queue has a row (the flow claim). Returns
    the rows it ended, to be reported as a claim's.

    A claim runs it first. An idle worker runs it too, ``ahead`` seconds before
    each part falls due (``Source.upkeep``), so that the claim a NOTIFY wakes does
    not pay for it.
    """
    now = time.monotonic() + ahead
    ended: list[ClaimedJob] = []
    if now - _steps_ended["at"] > LAPSED_STEPS_EVERY:
        _steps_ended["at"] = now - ahead
        ended = end_lapsed_steps(conn, params)
    if now - _configured["at"] > CONFIGURED_TTL:
        any_row, _unmarked = conn.execute(
            sql.QUEUE_MARKS_CHECK, {"worker_id": params["worker_id"]}
        ).fetchone()
        _configured["any"] = bool(any_row)
        _configured["at"] = now - ahead
    return ended


def end_lapsed_steps(conn: Any, params: dict[str, Any]) -> list[ClaimedJob]:
    """End the workflow steps of the selected queues whose lease lapsed on their last
    attempt (``dead``) or after an operator's abort (``cancelled``), and apply their
    failure to their children in the same statement (``sql.END_LAPSED_STEPS``).

    The claims leave these rows to it; the rows come back as a claim returns them,
    so the worker reports them as it reports the rows a claim ended.
    """
    params = {**params, "channel": get_settings().NOTIFY_CHANNEL}
    return _above_floor(conn, params, sql.END_LAPSED_STEPS)


def complete(
    conn: Any, outcomes: Sequence[JobOutcome], counts: dict[str, str] | None = None
) -> set[int]:
    """Write a batch of attempts' outcomes in one statement; return the ids written.

    An id missing from the answer lost its lease (its token no longer matches).
    ``counts`` (``rollup.store.record_params``: the batch's rollup rows) are added
    to the console's rollup by the same statement, if every row was written.
    """
    # The arrays go as PostgreSQL array literals (text, cast by the statement):
    # psycopg's generic list dumper adapts element by element and took the
    # largest share of the completer's time in a drain of short tasks.
    params = {
        "ids": array_literal([str(o.id) for o in outcomes]),
        "tokens": array_literal([str(o.token) for o in outcomes]),
        "statuses": array_literal([str(o.status) for o in outcomes]),
        "results": text_array_literal([o.result_json for o in outcomes]),
        "delays": array_literal([repr(float(o.delay)) for o in outcomes]),
        "errors": text_array_literal([o.error_json for o in outcomes]),
        "last_errors": text_array_literal([o.last_error for o in outcomes]),
        "refunds": array_literal([str(int(o.refund)) for o in outcomes]),
        # Released workflow steps wake idle workers (sql/workflows.py, ``release``).
        "channel": get_settings().NOTIFY_CHANNEL,
    }
    # Only a batch with a workflow step (or a job its claim did not describe) needs
    # the release: the plain forms skip its planning (sql/jobs.py).
    steps = any(o.step for o in outcomes)
    if counts is None:
        statement = sql.COMPLETE_JOBS if steps else sql.COMPLETE_PLAIN_JOBS
    else:
        statement = sql.COMPLETE_COUNTED_JOBS if steps else sql.COMPLETE_PLAIN_COUNTED_JOBS
        params.update(counts)
    return {row[0] for row in conn.execute(statement, params).fetchall()}


def read_outcomes(conn: Any, ids: list[int]) -> dict[int, tuple[str, uuid.UUID | None]]:
    """Current (status, locked_by) of jobs, to settle an ambiguous commit."""
    rows = conn.execute(sql.READ_OUTCOMES, {"ids": ids}).fetchall()
    return {row[0]: (row[1], row[2]) for row in rows}


def extend_leases(
    conn: Any, ids: list[int], tokens: list[uuid.UUID], lease: float
) -> list[tuple[int, bool]]:
    """Extend the leases of held jobs by ``lease`` seconds, guarded by token.

    Returns each job still held with whether an operator asked to abort it; a job
    missing from the answer was lost (re-claimed after its lease lapsed).
    """
    return [
        (row[0], bool(row[1]))
        for row in run_lease_extension(conn, sql.EXTEND_JOB_LEASES, ids, tokens, lease)
    ]


def any_due(conn: Any, params: dict[str, Any]) -> bool:
    """Whether a (non-atomic) job is due now or held by any worker (``--burst``)."""
    return bool(conn.execute(sql.ANY_DUE, params).fetchone()[0])


def any_left(conn: Any, params: dict[str, Any]) -> bool:
    """Whether any job is waiting, due or not, or held (``--until-empty``)."""
    return bool(conn.execute(sql.ANY_LEFT, params).fetchone()[0])


def retries_due_now(conn: Any, params: dict[str, Any]) -> None:
    """Make every scheduled retry of the selected queues due now (testing.py)."""
    conn.execute(sql.RETRIES_DUE_NOW, params)


# -- atomic jobs (worker/atomic.py) ------------------------------------------------


def atomic_due(conn: Any, params: dict[str, Any]) -> int:
    """How many atomic jobs are due, up to ``params['limit']``."""
    return int(conn.execute(sql.ATOMIC_DUE, params).fetchone()[0])


def any_atomic_left(conn: Any, params: dict[str, Any]) -> bool:
    """Whether any atomic job is waiting, due or not (``--until-empty``)."""
    return bool(conn.execute(sql.ATOMIC_LEFT, params).fetchone()[0])


def claim_atomic(conn: Any, params: dict[str, Any]) -> list[ClaimedJob]:
    """Claim atomic jobs as :func:`claim` claims the others: each attempt is counted
    and leased by this statement, which commits before any of them runs."""
    return _claim_with_flow(conn, params, sql.CLAIM_FLOW_ATOMIC_JOBS, sql.CLAIM_ATOMIC_JOBS)


def bound_atomic_transaction(cursor: Any, timeout_ms: int) -> None:
    """Bound the cursor's transaction (an atomic job's body) to ``timeout_ms``."""
    cursor.execute(sql.ATOMIC_TIMEOUTS, {"ms": str(timeout_ms)})


def complete_atomic(cursor: Any, job_id: int, token: uuid.UUID, result_json: str | None) -> bool:
    """Record an atomic job's success in the transaction of its body; False when the
    attempt no longer holds the row (its writes must then be rolled back)."""
    params = {
        "id": job_id,
        "token": token,
        "result": result_json,
        "channel": get_settings().NOTIFY_CHANNEL,
    }
    cursor.execute(sql.COMPLETE_ATOMIC_JOB, params)
    return cursor.fetchone() is not None


# -- progress (worker/attempt.py, a task's ``context.set_progress``) ---------------


def set_progress(db: str, job_id: int, token: uuid.UUID, fraction: float, message: str) -> bool:
    """Write a running attempt's progress; False when the attempt no longer holds the
    row (its lease was lost). On the task thread's own Django connection."""
    with connections[db].cursor() as cursor:
        cursor.execute(sql.SET_PROGRESS, [fraction, message, job_id, token])
        return cursor.rowcount == 1


# -- trace contexts (tracing.py, with PGQUEUE["TRACING"]) --------------------------


def store_trace_context(job_id: int, carrier: dict[str, str]) -> None:
    """Write the enqueue span's W3C context (``traceparent``...) into the new job.

    On Django's connection to the queue database, so in the enqueuing transaction:
    the context exists exactly when the job does.
    """
    with connections[get_settings().DATABASE].cursor() as cursor:
        cursor.execute(sql.STORE_TRACE_CONTEXT, [json.dumps(carrier), job_id])


def read_trace_contexts(conn: Any, ids: list[int]) -> list[tuple[int, dict[str, str]]]:
    """The stored trace contexts of claimed jobs (those that have one), by id."""
    return [(row[0], row[1]) for row in conn.execute(sql.READ_TRACE_CONTEXTS, {"ids": ids})]
