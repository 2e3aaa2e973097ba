"""Every state change of a job on the worker path, and the reads that decide them.

The worker's sources (``worker/sources.JobSource``, ``worker/atomic``) call these
functions and never run SQL themselves; the statements are in ``sql/jobs.py``
with why each is shaped so. Functions taking ``conn`` run on one of the worker's
own autocommit psycopg connections; the atomic ones take a Django cursor inside
the transaction that holds the job.

Every write to a claimed row is guarded by its claim token (``locked_by``): a
worker whose lease lapsed and whose row was taken by another changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from .. import sql
from ..db import array_literal, run_lease_extension, text_array_literal
from ..outcomes import JobOutcome
from ..worker.runner import ClaimedJob

# -- the worker's claim, completion and leases -------------------------------------


def claim(conn: Any, params: dict[str, Any]) -> list[ClaimedJob]:
    """Claim up to ``params['limit']`` due or lapsed jobs of the selected queues.

    Rows come back ``in_progress`` with a fresh token, or ``dead``/``cancelled``
    (a lapsed row out of attempts or aborted, finished by the claim itself).
    """
    return [ClaimedJob.from_row(row) for row in conn.execute(sql.CLAIM_JOBS, params).fetchall()]


def complete(conn: Any, outcomes: Sequence[JobOutcome]) -> set[int]:
    """Write a batch of attempts' outcomes in one statement; return the ids written.

    An id missing from the answer lost its lease (its token no longer matches).
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
    }
    return {row[0] for row in conn.execute(sql.COMPLETE_JOBS, params).fetchall()}


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
    return [
        ClaimedJob.from_row(row) for row in conn.execute(sql.CLAIM_ATOMIC_JOBS, params).fetchall()
    ]


def bound_atomic_transaction(cursor: Any, timeout_ms: int) -> None:
    """Bound the cursor's transaction (an atomic job's body) to ``timeout_ms``."""
    cursor.execute(sql.ATOMIC_TIMEOUTS, {"ms": str(timeout_ms)})


def complete_atomic(cursor: Any, job_id: int, token: uuid.UUID, result_json: str | None) -> bool:
    """Record an atomic job's success in the transaction of its body; False when the
    attempt no longer holds the row (its writes must then be rolled back)."""
    cursor.execute(sql.COMPLETE_ATOMIC_JOB, {"id": job_id, "token": token, "result": result_json})
    return cursor.fetchone() is not None


# -- trace contexts (tracing.py, with PGQUEUE["TRACING"]) --------------------------


def store_trace_context(job_id: int, carrier: dict[str, str]) -> None:
    """Write the enqueue span's W3C context (``traceparent``...) into the new job.

    On Django's connection to the queue database, so in the enqueuing transaction:
    the context exists exactly when the job does.
    """
    import json

    from django.db import connections

    from ..conf import get_settings

    with connections[get_settings().DATABASE].cursor() as cursor:
        cursor.execute(sql.STORE_TRACE_CONTEXT, [json.dumps(carrier), job_id])


def read_trace_contexts(conn: Any, ids: list[int]) -> list[tuple[int, dict[str, str]]]:
    """The stored trace contexts of claimed jobs (those that have one), by id."""
    return [(row[0], row[1]) for row in conn.execute(sql.READ_TRACE_CONTEXTS, {"ids": ids})]
