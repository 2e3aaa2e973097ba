"""Pieces of SQL that more than one statement uses, each built once and named.

Only table names and fixed text are formatted into these; values are always
parameters of the statements that use them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from ..states import CLAIMABLE, LIVE, TERMINAL, WAITING, sql_list

JOB_TABLE = "pgqueue_job"
APPLICATION_TABLE = "pgqueue_application"
ENDPOINT_TABLE = "pgqueue_endpoint"
EVENT_TABLE = "pgqueue_event"
DELIVERY_TABLE = "pgqueue_delivery"
ATTEMPT_TABLE = "pgqueue_delivery_attempt"
SCHEDULE_TABLE = "pgqueue_schedule"
TICK_TABLE = "pgqueue_schedule_tick"
WORKER_TABLE = "pgqueue_worker"
QUEUE_TABLE = "pgqueue_queue"
QUEUE_KEY_RATE_TABLE = "pgqueue_queue_key_rate"
WORKFLOW_TABLE = "pgqueue_workflow"
EDGE_TABLE = "pgqueue_workflow_edge"

# The state sets of a queue row as SQL lists, from their one declaration
# (states.py, which the partial indexes in the models' Meta are built from too):
# a statement that must match an index's predicate cannot drift from it.
#: ``('pending', 'failed')``: waiting rows, due or not (``status IN {CLAIMABLE_SQL}``).
CLAIMABLE_SQL = sql_list(CLAIMABLE)
#: ``('pending', 'in_progress', 'failed')``: rows not finished yet.
LIVE_SQL = sql_list(LIVE)
#: ``('succeeded', 'dead', 'cancelled')``: finished rows.
TERMINAL_SQL = sql_list(TERMINAL)
#: ``('waiting')``: workflow steps whose parents have not all ended.
WAITING_SQL = sql_list(WAITING)

#: The queue tables whose rows a worker claims (retention and the dashboard read both).
QUEUE_TABLES = (JOB_TABLE, DELIVERY_TABLE)

# The rows of the queues a worker serves (``runworkers --queues``), or all of them.
IN_QUEUES = "(%(all_queues)s OR queue_name = ANY(%(queues)s))"

# A disabled endpoint's waiting deliveries are "parked": a trigger on the endpoint
# table (migration 0004) moves their ``next_attempt_at`` to this instant when
# ``is_active`` goes false and back to now when it goes true, however the flag is
# changed. Parked rows lie beyond every ``next_attempt_at <= now()`` range the
# claim reads, so a big backlog on a disabled endpoint costs the claim nothing.
# Parking is an optimisation, never a condition of correctness: the claim still
# checks ``is_active``, so a row a race leaves unparked only costs a scan.
PARKED_AT = dt.datetime(9999, 1, 1, tzinfo=dt.UTC)
PARKED = "TIMESTAMPTZ '9999-01-01 00:00:00+00'"  # PARKED_AT, as SQL


def lease_expired_error(worker_sql: str) -> str:
    """``last_error`` of a row whose lease lapsed, as an SQL expression: written by the
    claim that takes it back; ``worker_sql`` is the column naming the worker that let
    it lapse."""
    return (
        f"'LeaseExpired: worker ' || {worker_sql}\n"
        "                              || ' stopped renewing its lease (worker died?)'"
    )


# ---- Planned at each run ---------------------------------------------------------
#
# PLAN_EACH_RUN: a condition that keeps a worker statement prepared but planned at
# every run, for the table as it is (see "Plans and table growth" in jobs.py).
_COSTLY_IN_A_GENERIC_PLAN = (
    "(SELECT pg_catalog.count(*) FROM pg_catalog.generate_series(1, 1000000000)) > 0"
)


def plan_each_run(guard_sql: str) -> str:
    """PLAN_EACH_RUN on ``guard_sql``, a typed placeholder the worker never passes as NULL."""
    return f"({guard_sql} IS NOT NULL OR {_COSTLY_IN_A_GENERIC_PLAN})"


# What sending a claimed delivery needs (webhooks/delivery_source.ClaimedDelivery's
# fields, in order), read from a ``claimed`` CTE of delivery rows: the deliveries'
# claim and the relay's end with it, each with its own ORDER BY. The endpoint's JSON
# comes as text, decoded by each delivery's attempt: an endpoint row Python cannot
# decode fails its own deliveries, not the decoding of the whole claim's result.
CLAIMED_FOR_SENDING_SQL = f"""SELECT c.id, c.status, c.locked_by, c.attempts, c.max_attempts,
       c.endpoint_id, e.url, e.secret, e.previous_secrets::text, e.headers::text, ev.msg_id,
       ev.event_type, ev.body, ev.created_at
FROM claimed AS c
JOIN {ENDPOINT_TABLE} AS e ON e.id = c.endpoint_id
JOIN {EVENT_TABLE} AS ev ON ev.id = c.event_id"""

# The conditions, by the parameter each statement carries anyway.
PLAN_EACH_RUN_WORKER = plan_each_run("%(worker_id)s::text")
PLAN_EACH_RUN_IDS = plan_each_run("%(ids)s::bigint[]")
PLAN_EACH_RUN_QUEUES = plan_each_run("%(all_queues)s::bool")
PLAN_EACH_RUN_LIMIT = plan_each_run("%(limit)s::bigint")


# ---- The claim's skeleton --------------------------------------------------------
#
# Every claim (jobs, deliveries) has the same frame:
#
# * Sources are ``MATERIALIZED`` CTEs: with the plain
#   ``WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED LIMIT n)`` form the planner
#   may run the subquery once per outer row and lock more than ``n`` rows
#   (PostgreSQL bug #15715). A materialized CTE is evaluated exactly once.
# * ``SKIP LOCKED`` lets concurrent workers claim disjoint rows without waiting.
# * The first source is always ``lapsed``: held rows whose lease ran out (their
#   worker died), oldest lapse first. There are few of them and the partial lease
#   index answers "any lease older than now()?" by reading one entry, so taking
#   them first costs nothing when nobody crashed, while putting them last could
#   starve them.
# * The picked ids are folded into arrays (``picked``) and joined back through
#   ``unnest``. The planner cannot estimate a ``LIMIT`` that is a parameter or an
#   expression and assumes a tenth of the due rows; joining a CTE of that size
#   makes it hash the whole table (a sequential scan per claim: 40 ms at 20,000
#   rows, growing with history). ``unnest`` of a parameter-sized array is
#   estimated at 100 rows, which keeps the join a primary-key lookup per claimed
#   row, as long as the plan is made for the table's actual size (see "Plans and
#   table growth" in jobs.py).
# * The claim commits asynchronously (``picked.relaxed``, ASYNC_COMMIT_SQL below):
#   it does not wait for its WAL to reach the disk.


# An asynchronous commit for the current transaction only (``set_config``'s
# ``is_local``), an expression for a CTE's select list: a CTE that calls a volatile
# function is never inlined, so it runs exactly once, before the commit. (Joined
# as a CTE of its own it cost 0.05 ms of planning per claim; as a column of
# ``picked``, nothing measurable.) For writes that PostgreSQL may forget in a
# crash of its own without anything lost:
#
# * a claim: the attempt's row, its token and lease. Forgotten, the row is due
#   again as it was before the claim and is claimed again, which is what a crash
#   after a durable claim leads to as well (the lease lapses). The worker's
#   completion is fenced by the forgotten token and writes nothing. A later
#   synchronous commit (any completion, an atomic task's transaction) flushes
#   the WAL up to its own commit record, so a claim is durable before anything
#   that depends on it is.
# * the HTTP API's rate-limit row (sql/api.py): a crash forgets a few requests'
#   cost.
#
# Not for completions: a completion reported to nobody but the database must
# survive the crash that follows it, or a finished task runs again.
ASYNC_COMMIT_SQL = "pg_catalog.set_config('synchronous_commit', 'off', true)"


def lapsed_source(columns_sql: str, rows_sql: str, alias: str, condition_sql: str = "") -> str:
    """The ``lapsed`` CTE of a claim: up to ``%(limit)s`` rows of ``rows_sql`` (whose
    claimed table is aliased ``alias``) held past their lease, oldest lapse first."""
    also_sql = f"\n      AND {condition_sql}" if condition_sql else ""
    return f"""lapsed AS MATERIALIZED (
    SELECT {columns_sql}
    FROM {rows_sql}
    WHERE {alias}.status = 'in_progress' AND {alias}.locked_until < now(){also_sql}
    ORDER BY {alias}.locked_until
    LIMIT %(limit)s
    FOR UPDATE OF {alias} SKIP LOCKED
)"""


def picked(column_names: Sequence[str], sources_sql: str) -> str:
    """The ``picked`` CTE: the rows of ``sources_sql`` (a UNION ALL of the claim's
    sources, one column per name) folded into one array per column, and the
    claim's asynchronous commit (``relaxed``, ASYNC_COMMIT_SQL)."""
    aggregates = [f"pg_catalog.array_agg({column}) AS {column}" for column in column_names]
    folded_sql = ",\n           ".join([*aggregates, f"{ASYNC_COMMIT_SQL} AS relaxed"])
    return f"""picked AS (
    SELECT {folded_sql}
    FROM (
        {sources_sql}
    ) AS all_sources
)"""


def unnest_picked(column_names: Sequence[str]) -> str:
    """``picked``'s arrays back as rows ``p``, for the claim's UPDATE to join by id."""
    arrays_sql = ", ".join(f"picked.{column}" for column in column_names)
    names_sql = ", ".join(column_names)
    return f"picked, unnest({arrays_sql})\n         AS p({names_sql})"


# ---- Rate limits (GCRA) ----------------------------------------------------------
#
# The generic cell rate algorithm, a token bucket kept as one timestamp per limited
# row (an endpoint, a queue): ``rate_tat`` (the theoretical arrival time) moves on
# by ``rate_period / rate_limit`` per start; a bucket of ``rate_limit`` starts fills
# back at ``rate_limit`` per ``rate_period``. One column, written only under the
# row's lock by the claim, so it holds across processes and hosts. The epsilon
# absorbs float rounding of the interval arithmetic.


def rate_allowance(alias: str) -> str:
    """How many starts row ``alias`` may make now under its rate limit (NULL: no limit)."""
    return f"""CASE WHEN {alias}.rate_limit IS NOT NULL THEN GREATEST(0, pg_catalog.floor(
        {alias}.rate_limit - GREATEST(0, extract(epoch FROM {alias}.rate_tat - now()))
                       * {alias}.rate_limit / {alias}.rate_period + 0.000001))::int END"""


def rate_tat_after(alias: str, starts_sql: str) -> str:
    """Row ``alias``'s new ``rate_tat`` once a claim took ``starts_sql`` starts of it."""
    return f"""CASE WHEN {alias}.rate_limit IS NOT NULL
            THEN GREATEST({alias}.rate_tat, now())
                 + pg_catalog.make_interval(secs => {starts_sql} * {alias}.rate_period::float8
                                 / {alias}.rate_limit) END"""


# ---- After the claim -------------------------------------------------------------


def read_outcomes(marker: str, table: str) -> str:
    """What rows of ``table`` hold now, by id: after an ambiguous commit (the
    connection died while COMMIT's reply was in flight) the worker asks, and a row
    whose ``locked_by`` is still its token and whose status is no longer in_progress
    was written by it."""
    return f"""/* pgqueue:{marker} */
SELECT id, status, locked_by FROM {table}
WHERE id = ANY((SELECT %(ids)s::bigint[])::bigint[]) AND {PLAN_EACH_RUN_IDS}
"""


def extend_leases(marker: str, table: str, *, also_return_sql: str = "") -> str:
    """Extend the leases of every row of ``table`` this process still holds.

    Guarded by token like a completion and, like it, without naming ``status``
    ("still held" is ``locked_until IS NOT NULL``: see COMPLETE_JOBS). Rows missing
    from RETURNING were lost (re-claimed after a lapse). The arrays come as array
    literals, read through sub-selects (see "Plans and table growth" in jobs.py).
    """
    return f"""/* pgqueue:{marker} */
UPDATE {table} AS j SET
    locked_until = now() + pg_catalog.make_interval(secs => %(lease)s)
FROM unnest((SELECT %(ids)s::bigint[]), (SELECT %(tokens)s::uuid[])) AS v(id, token)
WHERE j.id = v.id AND j.locked_by = v.token AND j.locked_until IS NOT NULL
  AND {PLAN_EACH_RUN_IDS}
RETURNING j.id{also_return_sql}
"""
