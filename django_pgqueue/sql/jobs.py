"""Statements of the job queue: enqueue, claim, complete, leases, atomic jobs, reads."""

from __future__ import annotations

from ..states import CLAIMABLE, WAITING, sql_list
from .fragments import (
    CLAIMABLE_SQL,
    IN_QUEUES,
    JOB_TABLE,
    LIVE_SQL,
    PLAN_EACH_RUN_IDS,
    PLAN_EACH_RUN_LIMIT,
    PLAN_EACH_RUN_QUEUES,
    PLAN_EACH_RUN_WORKER,
    QUEUE_KEY_RATE_TABLE,
    QUEUE_TABLE,
    TERMINAL_SQL,
    extend_leases,
    lapsed_source,
    lease_expired_error,
    picked,
    rate_allowance,
    rate_tat_after,
    read_outcomes,
    unnest_picked,
)
from .rollup import ALL_IDS_WRITTEN, rollup_add
from .workflows import release

# The release of workflow steps both completions run (sql/workflows.py), over the
# rows their ``done`` CTE ended.
_RELEASE_DONE = release("done")

#: What the claims return of a job (CLAIM_JOBS, CLAIM_ATOMIC_JOB): each attribute of
#: ``jobs.rows.ClaimedJob`` with the expression that reads it. The one list both the
#: RETURNING clause and the row decoder are built from, so a row is decoded by name
#: and a column is added here and in the dataclass, in any order. The attempt log
#: and worker ids come back as text, decoded only when a TaskResult is built.
CLAIMED_JOB_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "j.id"),
    ("status", "j.status"),
    ("token", "j.locked_by"),
    ("attempts", "j.attempts"),
    ("max_attempts", "j.max_attempts"),
    ("task_path", "j.task_path"),
    # As JSON text, decoded by the runner for the attempt: a row whose arguments
    # Python cannot read (written past enqueue()) fails its own job, not the
    # decoding of the whole claim's result.
    ("args", "j.args::text"),
    ("kwargs", "j.kwargs::text"),
    ("queue_name", "j.queue_name"),
    ("priority", "j.priority"),
    ("backend", "j.backend"),
    # The three times only a TaskResult reads (signals, ``takes_context``) come as
    # seconds since the epoch: decoding three timestamptz cost the claim loop
    # 1.19 µs per row, three floats 0.38 (the runner makes datetimes when needed).
    ("created_at", "pg_catalog.date_part('epoch', j.created_at)"),
    ("started_at", "pg_catalog.date_part('epoch', j.started_at)"),
    ("last_attempted_at", "pg_catalog.date_part('epoch', j.last_attempted_at)"),
    ("errors", "j.errors::text"),
    ("worker_ids", "j.worker_ids::text"),
    # Seconds from due to this claim, for the console's rollup (the claim leaves
    # next_attempt_at as it was, so RETURNING still reads when the job was due).
    ("wait", "pg_catalog.date_part('epoch', now() - j.next_attempt_at)"),
    # Whether the job is a workflow step, whose completion must release its
    # children (COMPLETE_JOBS) rather than skip the release (COMPLETE_PLAIN_JOBS).
    ("step", "j.workflow_id IS NOT NULL"),
)
_CLAIM_RETURNING = ", ".join(expression for _, expression in CLAIMED_JOB_COLUMNS)
# The same columns named, for a statement whose UPDATE is a CTE (END_LAPSED_STEPS),
# and read back from it in the declared order.
_CLAIMED_RETURNING = ", ".join(
    f"{expr_sql} AS {column}" for column, expr_sql in CLAIMED_JOB_COLUMNS
)
_CLAIMED_NAMES = ", ".join(f"done.{column}" for column, _ in CLAIMED_JOB_COLUMNS)

#: A new job's columns, in one list for every way a job is written (INSERT_JOB,
#: INSERT_KEYED_JOB, INSERT_JOBS, COPY_JOBS and the COPY rows of
#: ``bulk.copy_chunks``). Each column has its value in the single-row INSERT and,
#: when every new row holds the same value, that value as COPY text (``None``:
#: the value comes with the call). ``args`` and ``kwargs`` differ per row.
NEW_JOB_COLUMNS: tuple[tuple[str, str, str | None], ...] = (
    ("status", "'pending'", "pending"),
    ("priority", "%s", None),
    ("attempts", "0", "0"),
    ("max_attempts", "%s", None),
    ("next_attempt_at", "COALESCE(%s, now())", None),
    ("worker_id", "''", ""),
    ("last_error", "''", ""),
    ("errors", "'[]'", "[]"),
    ("created_at", "now()", None),
    ("updated_at", "now()", None),
    ("task_path", "%s", None),
    ("queue_name", "%s", None),
    # The flow-control mark: whether the queue has a row (its parameter is the
    # queue's name again). One lookup of a small table per statement, not per row
    # (the subquery depends on the parameter alone); a COPY batch gets it from
    # RESERVE_JOB_IDS, once per batch.
    ("flow_controlled", f"EXISTS (SELECT 1 FROM {QUEUE_TABLE} WHERE name = %s)", None),
    ("backend", "%s", None),
    ("args", "%s::jsonb", None),
    ("kwargs", "%s::jsonb", None),
    ("worker_ids", "'[]'", "[]"),
)
_PER_ROW = ("args", "kwargs")
#: The columns INSERT_JOB takes as parameters, in placeholder order.
NEW_JOB_PARAMETERS = tuple(column for column, value, _ in NEW_JOB_COLUMNS if "%s" in value)
_NEW_JOB_NAMES = ", ".join(column for column, _, _ in NEW_JOB_COLUMNS)
_NEW_JOB_VALUES = ", ".join(value for _, value, _ in NEW_JOB_COLUMNS)
# INSERT_JOBS reads the per-row values from ``unnest`` (``t``), the rest as INSERT_JOB.
_NEW_JOBS_VALUES = ", ".join(
    f"t.{column}::jsonb" if column in _PER_ROW else value for column, value, _ in NEW_JOB_COLUMNS
)

#: The columns COPY_JOBS writes after ``id, args, kwargs``: the same in every row of
#: one bulk enqueue, formatted once per batch (``copy_tail``).
COPY_TAIL_COLUMNS = tuple(column for column, _, _ in NEW_JOB_COLUMNS if column not in _PER_ROW)


def copy_tail(given: dict[str, object]) -> tuple[object, ...]:
    """The values of COPY_TAIL_COLUMNS for one bulk enqueue: each column's fixed value,
    or ``given[column]`` for those that come with the call."""
    fixed = {column: text for column, _, text in NEW_JOB_COLUMNS}
    return tuple(
        given[column] if fixed[column] is None else fixed[column] for column in COPY_TAIL_COLUMNS
    )


# Enqueue one job inside the caller's transaction (Django cursor).
# ``now()`` is the caller's transaction start, which is what "enqueued at" means.
# The row is due at ``run_after`` or at once.
INSERT_JOB = f"""/* pgqueue:enqueue */
INSERT INTO {JOB_TABLE} ({_NEW_JOB_NAMES})
VALUES ({_NEW_JOB_VALUES})
RETURNING id, created_at
"""

# Enqueue one unique, atomic or keyed job (Django cursor). INSERT_JOB's row plus
# the unique key, the atomic flag and the concurrency key (flow control; a job
# without these options goes through INSERT_JOB, which stays as it is). A live job
# of the same task with the same unique key wins: ``ON CONFLICT`` names the partial
# unique index ``pgq_job_unique_live`` by its columns and predicate (written as in
# the index so PostgreSQL infers it), a concurrent enqueue of the same key waits
# for the first transaction and then inserts nothing. No row back means "a live
# job holds the key" (LIVE_JOB_WITH_KEY then reads it, with a fresh snapshot).
# Rows without a unique key never conflict.
INSERT_KEYED_JOB = f"""/* pgqueue:enqueue_keyed */
INSERT INTO {JOB_TABLE} ({_NEW_JOB_NAMES}, unique_key, atomic, concurrency_key)
VALUES ({_NEW_JOB_VALUES}, %s, %s, %s)
ON CONFLICT (task_path, unique_key)
    WHERE unique_key IS NOT NULL AND status IN {LIVE_SQL}
DO NOTHING
RETURNING id, created_at
"""


# Enqueue every step of a workflow in one statement (workflows/, through the job
# store), in the caller's transaction with the workflow's other rows. The ids are
# drawn first (RESERVE_JOB_IDS), so the edges can name them. INSERT_JOB's columns,
# each read from its own array (``t``: steps differ in task, queue, options), and
# the step's: ``status`` is ``waiting`` for a step with parents (no due index
# holds it, so the claim never sees it) or ``pending`` for a root. A step has no
# unique key (its workflow is what is unique).
def _step_value(column: str, value: str) -> str:
    """INSERT_JOB's value of ``column`` read from the step's own array (``t``)."""
    if column == "status":
        return "t.status"
    return value.replace("%s", f"t.{column}")


STEP_COLUMNS = (
    "id",
    "status",
    *NEW_JOB_PARAMETERS,
    "atomic",
    "concurrency_key",
    "step_name",
    "step_policy",
    "pending_parents",
)
#: Each array's element type (text unless named).
_STEP_TYPES = {
    "id": "bigint",
    "priority": "smallint",
    "max_attempts": "int",
    "next_attempt_at": "timestamptz",
    "atomic": "bool",
    "pending_parents": "int",
}
_STEP_ARRAY_TYPES = {column: _STEP_TYPES.get(column, "text") for column in STEP_COLUMNS}
_STEP_ARRAYS_SQL = ", ".join(
    f"(SELECT %({column})s::{type_sql}[])" for column, type_sql in _STEP_ARRAY_TYPES.items()
)
_STEP_NAMES_SQL = ", ".join(STEP_COLUMNS)
_STEP_VALUES_SQL = ", ".join(_step_value(c, v) for c, v, _ in NEW_JOB_COLUMNS)
INSERT_STEP_JOBS = f"""/* pgqueue:enqueue_steps */
INSERT INTO {JOB_TABLE} (id, {_NEW_JOB_NAMES}, atomic, concurrency_key,
    workflow_id, step_name, step_policy, pending_parents, failed_parents)
SELECT t.id, {_STEP_VALUES_SQL}, t.atomic, t.concurrency_key,
       %(workflow_id)s, t.step_name, t.step_policy, t.pending_parents, 0
FROM unnest({_STEP_ARRAYS_SQL}) AS t({_STEP_NAMES_SQL})
"""

# The live job holding a unique key (the partial unique index answers it).
LIVE_JOB_WITH_KEY = f"""/* pgqueue:live_job_with_key */
SELECT id FROM {JOB_TABLE}
WHERE task_path = %s AND unique_key = %s AND status IN {LIVE_SQL}
"""

# Reserve ids for a bulk enqueue. ``INSERT ... RETURNING`` does not promise to
# return rows in input order, so ids are drawn first and written explicitly: the
# caller then knows which result belongs to which argument list, and the same
# rows can go through COPY for large batches. One row holding an array (in draw
# order, which keeps a batch's jobs FIFO) rather than a row per id: decoding
# thousands of rows, each with its own timestamp, cost more than the COPY itself.
# The sequence is looked up once, in a scalar subquery (an InitPlan): written as
# nextval's argument directly, pg_get_serial_sequence ran once per id, a catalog
# lookup each, and drawing 100,000 ids took five times as long.
#
# Third column: whether queue ``%s`` has a row, the flow-control mark of a COPY
# batch (NEW_JOB_COLUMNS), in the same round trip (NULL: no queue asked).
RESERVE_JOB_IDS = f"""/* pgqueue:reserve_ids */
SELECT ARRAY(
    SELECT nextval((SELECT pg_get_serial_sequence('{JOB_TABLE}', 'id')::regclass))
    FROM pg_catalog.generate_series(1, %s) ORDER BY 1
), now(), EXISTS (SELECT 1 FROM {QUEUE_TABLE} WHERE name = %s)
"""

# Bulk enqueue of many jobs of one task in one statement (arrays, not a VALUES
# list: the statement text stays the same whatever the batch size). The
# parameters are INSERT_JOB's, with the ids and the per-row arguments as arrays
# at the end.
INSERT_JOBS = f"""/* pgqueue:enqueue_many */
INSERT INTO {JOB_TABLE} (id, {_NEW_JOB_NAMES})
SELECT t.id, {_NEW_JOBS_VALUES}
FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS t(id, args, kwargs)
"""

# The same rows through COPY (text format), for large batches (several times
# faster than an INSERT). The columns that differ per row come first and the rest
# are the same in every row, so the caller formats that tail once per batch and
# each row is its id, its arguments and the tail (bulk.copy_chunks).
_COPY_TAIL_NAMES = ", ".join(COPY_TAIL_COLUMNS)
COPY_JOBS = f"""COPY {JOB_TABLE} (id, args, kwargs, {_COPY_TAIL_NAMES}) FROM STDIN"""

# Claim up to ``limit`` jobs in one statement, in the claim's frame
# (fragments.py: materialized sources with SKIP LOCKED, lapsed leases first, the
# picked ids joined back through ``unnest``).
#
# * Two sources: rows whose lease lapsed (their worker died) and due rows.
# * ``attempts`` is counted here, at claim time: a task that kills its worker
#   still uses up an attempt, so it cannot crash-loop the fleet forever. A lapsed
#   row that has no attempts left goes to ``dead`` in this same statement instead
#   of being run again (status 'dead' in RETURNING; the worker skips it). So does
#   a lapsed row an operator asked to abort, which goes to ``cancelled``. Such a
#   row that is a workflow step is not the claim's: END_LAPSED_STEPS ends it and
#   releases its children (a filter on the few lapsed rows, nothing for the rest).
# * ``locked_by`` gets a fresh random token per claim: the fencing token every
#   later write of this attempt must present.
# * The due source reads the ``(priority DESC, next_attempt_at, id)`` partial
#   index in order; terminal rows are not in it, so history does not slow it.
#   Atomic jobs (``atomic = true``) are claimed by the same statement made for
#   them (CLAIM_ATOMIC_JOBS), lapsed ones included, and each source takes only
#   its own kind: the flag is a filter here, not a condition of the shared due
#   index, because atomic jobs are expected to be a small share of the due rows
#   (they have their own partial index, ``pgq_job_atomic_due_idx``).
#
# Flow control (docs/flow-control.md), decided in the claim, from rows. Queues that
# have a row in ``pgqueue_queue`` (paused, limited, or configured for the round
# robin over keys alone) are claimed by their own statement, CLAIM_FLOW_JOBS,
# which the job store runs only while some queue has a row (it asks once a
# second): with none configured, the claim is today's statement and costs what it
# did (planning the flow claim took three times the plain one's). A job of a
# queue that has a row is *marked* (``flow_controlled``) when it is written
# (NEW_JOB_COLUMNS) or when its queue gets its row (MARK_QUEUE_JOBS); only
# marked jobs are in the flow claim's index, so the backlog of queues without
# limits never writes it. CLAIM_JOBS skips marked jobs and itself reads the rows
# (``flow``, a handful; none configured, none read): an unmarked job of a queue
# that has one is marked, not run (``marked``), so a pause or a limit holds from
# the next claim whatever the store last heard and whenever the job was written.
# In CLAIM_FLOW_JOBS:
#
# * ``flow``: the queues served here that have a row.
# * ``held``: of those, the queues not paused, locked in name order (waiting,
#   not skipping, as the delivery claim locks endpoints) and fenced by
#   ``served_at``: the running jobs this statement counts are from its snapshot,
#   and a claim that committed after that snapshot is invisible to it, so every
#   claim stamps ``served_at`` on the queues it took from and a queue whose
#   locked (newest) row no longer carries the snapshot's stamp drops out of this
#   claim; the next takes it. The limit thus holds across processes and hosts
#   without a counter that could drift. ``room``: the least of what the batch
#   leaves, ``concurrency`` minus the queue's running jobs (counted from the
#   rows, see _RUNNING_IN_QUEUE) and the GCRA rate allowance.
# * ``keys``: each held queue's keys with waiting jobs, by a skip scan of
#   ``pgq_job_flow_due_idx`` (one descent per key, however many jobs each holds;
#   jobs without a key are key ''). ``flow_picks``: per key, its first jobs in
#   priority order, at most the queue's room and, for a key, ``key_concurrency``
#   minus the key's running jobs and the key's own GCRA allowance
#   (``key_rate_limit``, its state a row of pgqueue_queue_key_rate; no row is a
#   full bucket); each numbered within its key.
# * ``flow_due``: per queue the picks in round robin over keys (each key's
#   first, then each key's second...), at most its room, locked with SKIP LOCKED
#   by primary key. A lone key fills the room (work-conserving); a flood of one
#   key does not delay another key's first job past one claim.
# * ``served``: the queues taken from get their stamp and their rate state moved
#   on; ``key_served``: so does each key's under a key rate limit (an upsert:
#   the queue row's lock, held here, orders every writer of a queue's key rows).
#   Jobs over a limit are simply not picked: they stay pending, no attempt spent.
_CLAIM_JOB_PICKED = ("id", "exhausted", "lapsed")
_PICKED_JOBS = picked(
    _CLAIM_JOB_PICKED,
    """SELECT id, exhausted, true AS lapsed FROM lapsed
        UNION ALL
        SELECT id, false, false FROM due WHERE NOT unmarked""",
)
_PICKED_FLOW_JOBS = picked(
    _CLAIM_JOB_PICKED, "SELECT id, false AS exhausted, false AS lapsed FROM flow_due"
)
_JOB_LEASE_EXPIRED = lease_expired_error("j.worker_id")
# A lapsed row that may not run again: out of attempts, or an operator asked to
# abort it. The claims end such a row in their UPDATE; a workflow step is left to
# END_LAPSED_STEPS, which releases its children in the same statement.
_EXHAUSTED_SQL = "(j.attempts >= j.max_attempts OR j.abort_requested_at IS NOT NULL)"
# The attempt log's entry of a lapsed lease (the claims and END_LAPSED_STEPS).
_LEASE_EXPIRED_ENTRY_SQL = """j.errors || pg_catalog.jsonb_build_object(
                 'attempt', j.attempts,
                 'exception_class_path', 'django_pgqueue.exceptions.LeaseExpired',
                 'traceback', 'Lease expired: worker ' || j.worker_id
                     || ' stopped renewing it (it crashed, was killed or lost the database).',
                 'at', now(),
                 'worker_id', j.worker_id)"""
_UNNEST_PICKED_JOBS = unnest_picked(_CLAIM_JOB_PICKED)
# The running jobs of queue ``q`` (through the lease index: every running job, a
# few per worker thread) and of key ``k`` (through pgq_job_flow_run_idx, which holds
# only running keyed jobs, so jobs without a key never pay for it).
_RUNNING_IN_QUEUE = f"""SELECT pg_catalog.count(*) FROM {JOB_TABLE} AS r
               WHERE r.queue_name = q.name AND r.status = 'in_progress'"""
_RUNNING_OF_KEY = f"""SELECT pg_catalog.count(*) FROM {JOB_TABLE} AS r
                 WHERE r.queue_name = k.queue_name AND r.status = 'in_progress'
                   AND r.concurrency_key IS NOT NULL AND r.concurrency_key = k.key"""
# Key ``k``'s rate state as ``rate_allowance``/``rate_tat_after`` read one (NULL
# limit: no key rate limit, and the key row is not read; jobs without a key have
# only the queue's limits). ``OFFSET 0`` keeps the planner from pulling the
# subquery up into its two readers (the pick's LIMIT and its output), which
# would look the key's row up twice.
_KEY_RATE = f"""SELECT h.key_rate_limit AS rate_limit, h.key_rate_period AS rate_period,
           CASE WHEN h.key_rate_limit IS NOT NULL AND k.key <> '' THEN
               (SELECT t.rate_tat FROM {QUEUE_KEY_RATE_TABLE} AS t
                WHERE t.queue_name = k.queue_name AND t.key = k.key) END AS rate_tat
    OFFSET 0"""
# The first waiting key of queue ``{q}`` after ``{after}``, in the order of
# pgq_job_flow_due_idx (so: one index descent).
_NEXT_KEY = f"""(SELECT COALESCE(n.concurrency_key, '') FROM {JOB_TABLE} AS n
             WHERE n.queue_name = {{q}}{{after}} AND n.status IN {CLAIMABLE_SQL}
               AND n.flow_controlled
             ORDER BY n.queue_name, COALESCE(n.concurrency_key, '') LIMIT 1)"""
# The plain ``due`` source skips the marked jobs (``flow_controlled``: the flow
# claim's). Written bare, ``NOT flow_controlled`` is estimated from the column's
# statistics: with most of the backlog marked (the busy queue is the limited one)
# it is estimated at few rows, the LIMIT then looks unreachable through the
# ordered index and the planner sorts a sequential scan of the whole backlog
# instead. Wrapped in COALESCE (which changes nothing: the column is NOT NULL) it
# gets the planner's default estimate and the index stays the plan.
_NOT_MARKED = "COALESCE(NOT flow_controlled, true)"
# An unmarked job of a queue that has a row (written by a transaction that began
# before the queue's first configuration, or put back by a replay): the plain
# claim does not run it, it marks it (``marked``), and the flow claim takes it
# from then on, under the queue's limits. The mark is thus kept true to the rows
# by the claim itself; QUEUE_MARKS_CHECK clears the marks of queues whose row
# went.
_IN_FLOW_QUEUE = "queue_name = ANY (ARRAY(SELECT name FROM flow))"


# ---- The scan floor: claims under a held-back xmin horizon ------------------------
#
# A claim reads the due index from its head, and a lapsed lease from the lease
# index's. Every job leaves an entry in both (its pending and its running
# version), and vacuum removes them once no snapshot can see those versions. A
# session that holds the xmin horizon back (idle in transaction, a long report,
# a standby's feedback) keeps them all: they gather at the head of both indexes,
# where their rows were due and their leases ran out, and every claim fetches each
# one's heap tuple to find it dead. Measured at 100 jobs/s: 7 ms a claim after
# two minutes of such a pin, growing by the minute, the claim loop's backend at
# 65 % of a core.
#
# ``%(floor)s`` bounds both scans from below: NULL reads the whole index (a *full*
# claim); a number of seconds reads only rows due, and leases lapsed, that
# recently, so the index scan starts past the dead head (0.28 against 7.2 ms
# with 14,000 dead entries). The worker's claim loop decides it
# (jobs/store.py, ``ScanFloor``): a full claim at least every second (or, while
# full claims are slow, at most 0.1 % of the loop's time, and every 30 s), and
# between them a floor just below the start of the last full claim that took
# every due row it could see (or, while full claims are seconds apart, a few
# seconds below the last floored claim that did). A row below the floor (written
# by a transaction that began more than ``ScanFloor.MARGIN`` before that claim, or
# put back with an old due time) is taken by the next full claim. With custom
# plans (PLAN_EACH_RUN) the planner folds the NULL test away: a full claim is
# today's statement and plan.
_FLOOR_SQL = """(%(floor)s::float8 IS NULL
           OR {column} >= now() - pg_catalog.make_interval(secs => %(floor)s::float8))"""
# The floor of the due source and of the lapsed leases (the claims, END_LAPSED_STEPS).
_DUE_FLOOR_SQL = _FLOOR_SQL.format(column="next_attempt_at")
_LEASE_FLOOR_SQL = _FLOOR_SQL.format(column="j.locked_until")


def _claim_jobs(marker: str, kind_sql: str) -> str:
    """The claim of the jobs ``kind_sql`` selects (``NOT atomic`` or ``atomic``) in
    queues without a row: today's claim, skipping the configured queues' jobs,
    above the scan floor (``%(floor)s``, above)."""
    lapsed_sql = lapsed_source(
        f"j.id, {_EXHAUSTED_SQL} AS exhausted",
        f"{JOB_TABLE} AS j",
        "j",
        f"{IN_QUEUES} AND {kind_sql}\n      AND (j.workflow_id IS NULL OR NOT {_EXHAUSTED_SQL})"
        f"\n      AND {_LEASE_FLOOR_SQL}",
    )
    update_sql = _claimed_jobs_update()
    return f"""/* pgqueue:{marker} */
WITH {lapsed_sql}, flow AS (
    SELECT q.name FROM {QUEUE_TABLE} AS q WHERE %(all_queues)s OR q.name = ANY(%(queues)s)
), due AS MATERIALIZED (
    SELECT id, {_IN_FLOW_QUEUE} AS unmarked FROM {JOB_TABLE}
    WHERE status IN {CLAIMABLE_SQL} AND next_attempt_at <= now() AND {kind_sql}
      AND {IN_QUEUES} AND {_NOT_MARKED}
      AND {_DUE_FLOOR_SQL}
    ORDER BY priority DESC, next_attempt_at, id
    LIMIT %(limit)s - (SELECT pg_catalog.count(*) FROM lapsed)
    FOR UPDATE SKIP LOCKED
), marked AS (
    UPDATE {JOB_TABLE} AS m SET flow_controlled = true
    FROM due WHERE m.id = due.id AND due.unmarked
), {_PICKED_JOBS}
{update_sql}"""


def _claim_flow_jobs(marker: str, kind_sql: str) -> str:
    """The claim of the jobs ``kind_sql`` selects in the configured queues, under
    their limits (the flow control above)."""
    first_key_sql = _NEXT_KEY.format(q="h.name", after="")
    next_key_sql = _NEXT_KEY.format(
        q="k.queue_name", after="\n               AND COALESCE(n.concurrency_key, '') > k.key"
    )
    update_sql = _claimed_jobs_update()
    allowance_sql = rate_allowance("q")
    tat_sql = rate_tat_after("q", "s.n")
    key_allowance_sql = rate_allowance("kr")
    key_tat_sql = rate_tat_after("s", "s.n")
    return f"""/* pgqueue:{marker} */
WITH RECURSIVE flow AS (
    SELECT q.name, q.served_at, q.paused_at IS NOT NULL AS paused
    FROM {QUEUE_TABLE} AS q
    WHERE %(all_queues)s OR q.name = ANY(%(queues)s)
), held AS MATERIALIZED (
    SELECT q.name, q.key_concurrency, q.key_rate_limit, q.key_rate_period,
           GREATEST(0, LEAST(%(limit)s, q.concurrency - ({_RUNNING_IN_QUEUE}),
                             {allowance_sql})) AS room
    FROM {QUEUE_TABLE} AS q JOIN flow AS f ON f.name = q.name
    WHERE NOT f.paused AND q.paused_at IS NULL AND q.served_at IS NOT DISTINCT FROM f.served_at
    ORDER BY q.name
    FOR UPDATE OF q
), keys(queue_name, key) AS (
    SELECT h.name, {first_key_sql}
    FROM held AS h WHERE h.room > 0
    UNION ALL
    SELECT k.queue_name, {next_key_sql}
    FROM keys AS k WHERE k.key IS NOT NULL
), flow_picks AS (
    SELECT x.id, x.rank, x.priority, x.next_attempt_at, k.queue_name, k.key,
           kr.rate_limit AS key_rate_limit, kr.rate_period AS key_rate_period,
           kr.rate_tat AS key_rate_tat
    FROM keys AS k JOIN held AS h ON h.name = k.queue_name
    CROSS JOIN LATERAL ({_KEY_RATE}) AS kr
    CROSS JOIN LATERAL (
        SELECT c.id, c.priority, c.next_attempt_at,
               row_number() OVER (ORDER BY c.priority DESC, c.next_attempt_at, c.id) AS rank
        FROM {JOB_TABLE} AS c
        WHERE c.queue_name = k.queue_name AND COALESCE(c.concurrency_key, '') = k.key
          AND c.status IN {CLAIMABLE_SQL} AND c.flow_controlled
          AND c.next_attempt_at <= now() AND {kind_sql}
        ORDER BY c.priority DESC, c.next_attempt_at, c.id
        LIMIT CASE WHEN k.key = '' THEN h.room
                   ELSE GREATEST(0, LEAST(
                       h.room,
                       CASE WHEN h.key_concurrency IS NOT NULL
                            THEN h.key_concurrency - ({_RUNNING_OF_KEY}) END,
                       {key_allowance_sql})) END
    ) AS x
    WHERE k.key IS NOT NULL
), flow_due AS MATERIALIZED (
    SELECT j.id FROM {JOB_TABLE} AS j
    WHERE j.id = ANY(ARRAY(
        SELECT t.id FROM (
            SELECT p.id, p.queue_name, p.rank, p.priority, p.next_attempt_at,
                   row_number() OVER (PARTITION BY p.queue_name
                                      ORDER BY p.rank, p.priority DESC, p.next_attempt_at, p.id)
                       AS turn
            FROM flow_picks AS p
        ) AS t JOIN held AS h ON h.name = t.queue_name
        WHERE t.turn <= h.room
        ORDER BY t.turn, t.priority DESC, t.next_attempt_at, t.id
        LIMIT %(limit)s))
      AND j.status IN {CLAIMABLE_SQL} AND j.flow_controlled AND j.next_attempt_at <= now()
    FOR UPDATE OF j SKIP LOCKED
), served AS (
    UPDATE {QUEUE_TABLE} AS q SET
        served_at = clock_timestamp(),
        rate_tat = {tat_sql}
    FROM (SELECT p.queue_name, pg_catalog.count(*) AS n
          FROM flow_due AS d JOIN flow_picks AS p ON p.id = d.id
          GROUP BY p.queue_name) AS s
    WHERE q.name = s.queue_name
), key_served AS (
    INSERT INTO {QUEUE_KEY_RATE_TABLE} AS t (queue_name, key, rate_tat)
    SELECT s.queue_name, s.key, {key_tat_sql}
    FROM (SELECT p.queue_name, p.key, pg_catalog.count(*) AS n,
                 pg_catalog.min(p.key_rate_limit) AS rate_limit,
                 pg_catalog.min(p.key_rate_period) AS rate_period,
                 pg_catalog.min(p.key_rate_tat) AS rate_tat
          FROM flow_due AS d JOIN flow_picks AS p ON p.id = d.id
          WHERE p.key_rate_limit IS NOT NULL AND p.key <> ''
          GROUP BY p.queue_name, p.key) AS s
    ON CONFLICT (queue_name, key) DO UPDATE SET rate_tat = EXCLUDED.rate_tat
), {_PICKED_FLOW_JOBS}
{update_sql}"""


def _claimed_jobs_update() -> str:
    """The UPDATE both claims end with: the picked rows taken (or finished, for a
    lapsed row out of attempts) with a fresh token, and returned."""
    return f"""UPDATE {JOB_TABLE} AS j SET
    status = CASE WHEN NOT p.exhausted THEN 'in_progress'
                  WHEN j.abort_requested_at IS NOT NULL THEN 'cancelled'
                  ELSE 'dead' END,
    attempts = CASE WHEN p.exhausted THEN j.attempts ELSE j.attempts + 1 END,
    locked_by = CASE WHEN p.exhausted THEN j.locked_by ELSE gen_random_uuid() END,
    locked_until = CASE WHEN p.exhausted THEN NULL
                        ELSE now() + pg_catalog.make_interval(secs => %(lease)s) END,
    worker_id = CASE WHEN p.exhausted THEN j.worker_id ELSE %(worker_id)s END,
    worker_ids = CASE WHEN p.exhausted THEN j.worker_ids
                      ELSE j.worker_ids || pg_catalog.to_jsonb(%(worker_id)s::text) END,
    started_at = COALESCE(j.started_at, now()),
    last_attempted_at = CASE WHEN p.exhausted THEN j.last_attempted_at ELSE now() END,
    finished_at = CASE WHEN p.exhausted THEN now() ELSE NULL END,
    errors = CASE WHEN p.lapsed THEN {_LEASE_EXPIRED_ENTRY_SQL} ELSE j.errors END,
    last_error = CASE WHEN p.lapsed THEN {_JOB_LEASE_EXPIRED}
                      ELSE j.last_error END,
    updated_at = now()
FROM {_UNNEST_PICKED_JOBS}
WHERE j.id = p.id AND {PLAN_EACH_RUN_WORKER}
RETURNING {_CLAIM_RETURNING}"""


CLAIM_JOBS = _claim_jobs("claim", "NOT atomic")
CLAIM_FLOW_JOBS = _claim_flow_jobs("claim_flow", "NOT atomic")

# End the workflow steps whose lease lapsed on their last attempt (or that an
# operator asked to abort), and apply their failure to their children in the same
# statement: the release COMPLETE_JOBS runs (sql/workflows.py, ``release``), over
# the rows ended here (``done``). The claims skip these rows (their ``lapsed``
# source) so that the claim of plain jobs carries no release: planned at every run,
# the release's CTEs doubled its planning time. The job store runs this at most
# once a second per process, before a claim (jobs/store.py, ``claim``); with no
# step lapsed, it is one descent of the lease index. ``lapsed`` is the claims' own
# source (SKIP LOCKED, oldest lapse first), so two workers end a step once; what
# the row gets is what a claim writes to a lapsed row it ends. Rows come back as a
# claim returns them (``CLAIMED_JOB_COLUMNS``), ``dead`` or ``cancelled``. Planned
# at every run (PLAN_EACH_RUN, "Plans and table growth" below), as the claims are,
# and above the claim loop's scan floor as they are (above): it reads the same head
# of the lease index.
_LAPSED_STEPS = lapsed_source(
    "j.id",
    f"{JOB_TABLE} AS j",
    "j",
    f"{IN_QUEUES} AND j.workflow_id IS NOT NULL AND {_EXHAUSTED_SQL}\n      AND {_LEASE_FLOOR_SQL}",
)
END_LAPSED_STEPS = f"""/* pgqueue:end_lapsed_steps */
WITH RECURSIVE {_LAPSED_STEPS}, done AS (
UPDATE {JOB_TABLE} AS j SET
    status = CASE WHEN j.abort_requested_at IS NOT NULL THEN 'cancelled' ELSE 'dead' END,
    locked_until = NULL,
    finished_at = now(),
    errors = {_LEASE_EXPIRED_ENTRY_SQL},
    last_error = {_JOB_LEASE_EXPIRED},
    updated_at = now()
FROM lapsed WHERE j.id = lapsed.id AND {PLAN_EACH_RUN_QUEUES}
RETURNING {_CLAIMED_RETURNING}, j.workflow_id
), {_RELEASE_DONE}
SELECT {_CLAIMED_NAMES} FROM done WHERE (SELECT pg_catalog.count(*) FROM woken) >= 0
"""

# ---- Atomic jobs (worker/atomic.py) ----------------------------------------------
#
# An atomic job is claimed like any job, by CLAIM_ATOMIC_JOBS on the claim
# connection: the attempt is counted and a fenced lease taken in that short
# statement, which commits before the task runs. Then one transaction on the
# queue database (Django cursor, ``%(name)s``) holds the task's writes and the
# success (COMPLETE_ATOMIC_JOB), which commit together or not at all. A body
# that raises, or a transaction that fails, rolls back only the task's writes:
# its attempt stays counted and its row stays held by the lease, so nobody can
# claim it again before the failure is written (by the completer, guarded by the
# token, as for every job). A worker killed mid-task leaves a lease that lapses,
# and the lapsed row is claimed again with its attempts counted, or goes dead.
CLAIM_ATOMIC_JOBS = _claim_jobs("claim_atomic", "atomic")
CLAIM_FLOW_ATOMIC_JOBS = _claim_flow_jobs("claim_flow_atomic", "atomic")

# Whether any queue has a row (flow control): the job store asks at most once a
# second, and runs the flow claims only then (jobs/store.py, ``claim``).
# Mark the waiting jobs of queues that just got their row (``queues``: the
# first configure or pause, a worker applying PGQUEUE["QUEUES"]), in the same
# transaction, so the flow claim sees the backlog at once; it walks the due index
# (no index holds unmarked jobs by queue), once per new row. Workflow steps not
# released yet are marked too. A job written meanwhile by a transaction that
# could not see the new row is marked by the plain claim (CLAIM_JOBS).
_MARKABLE_SQL = sql_list((*CLAIMABLE, *WAITING))
MARK_QUEUE_JOBS = f"""/* pgqueue:mark_queue_jobs */
UPDATE {JOB_TABLE} AS j SET flow_controlled = true
WHERE j.queue_name = ANY (%(names)s::text[]) AND NOT j.flow_controlled
  AND j.status IN {_MARKABLE_SQL}
"""

# Clear the marks of queues whose row went (a worker applying settings that no
# longer name them), through the flow index.
UNMARK_QUEUE_JOBS = f"""/* pgqueue:unmark_queue_jobs */
UPDATE {JOB_TABLE} AS j SET flow_controlled = false
WHERE j.queue_name = ANY (%(names)s::text[]) AND j.flow_controlled
  AND j.status IN {CLAIMABLE_SQL}
"""

# Whether any queue has a row (the store asks once a second, and runs the flow
# claim only when one does), and, in the same round trip, the marks of waiting
# jobs whose queue has no row cleared: a job written by a transaction that saw a
# row another transaction then dropped. ``marked`` lists the queues that have
# marked waiting jobs by a skip scan of the flow index (one descent per queue);
# with no marked job it is one empty descent. The rows are taken with SKIP
# LOCKED, so two workers doing this never wait on each other. Planned at every run
# (PLAN_EACH_RUN_WORKER, always true): without a parameter, the worker's prepared
# statement kept the plan of its first run, made on an empty table, which read the
# whole job table with two sequential scans; under a held-back horizon that was 5
# to 16 ms, once a second, on the claim connection while it waited for a NOTIFY, so
# the claim that NOTIFY woke waited for it too (the pinned phase's pickup p99).
QUEUE_MARKS_CHECK = f"""/* pgqueue:queue_marks_check */
WITH RECURSIVE marked(name) AS (
    (SELECT m.queue_name FROM {JOB_TABLE} AS m
     WHERE m.flow_controlled AND m.status IN {CLAIMABLE_SQL}
     ORDER BY m.queue_name LIMIT 1)
    UNION ALL
    SELECT (SELECT m.queue_name FROM {JOB_TABLE} AS m
            WHERE m.flow_controlled AND m.status IN {CLAIMABLE_SQL} AND m.queue_name > k.name
            ORDER BY m.queue_name LIMIT 1)
    FROM marked AS k WHERE k.name IS NOT NULL
), orphaned AS (
    SELECT k.name FROM marked AS k
    WHERE k.name IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM {QUEUE_TABLE} AS q WHERE q.name = k.name)
), unmarked AS (
    UPDATE {JOB_TABLE} AS j SET flow_controlled = false
    WHERE j.id = ANY (ARRAY(
        SELECT o.id FROM {JOB_TABLE} AS o
        WHERE o.queue_name IN (SELECT name FROM orphaned)
          AND o.flow_controlled AND o.status IN {CLAIMABLE_SQL}
        FOR UPDATE SKIP LOCKED))
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM {QUEUE_TABLE}), (SELECT pg_catalog.count(*) FROM unmarked)
WHERE {PLAN_EACH_RUN_WORKER}
"""

# Bound the transaction. ``statement_timeout`` stops a statement that runs too
# long and ``idle_in_transaction_session_timeout`` ends a session whose task sits
# between statements (sleeping, HTTP) too long; both only for this transaction.
ATOMIC_TIMEOUTS = """/* pgqueue:atomic_timeouts */
SELECT pg_catalog.set_config('statement_timeout', %(ms)s, true),
       pg_catalog.set_config('idle_in_transaction_session_timeout', %(ms)s, true)
"""

# Success, in the task's transaction: it commits with the task's own writes.
# Guarded like COMPLETE_JOBS (token, and still held): an attempt whose lease was
# lost, or that the worker already recorded as given up, matches no row, and
# the caller then rolls the task's writes back instead of committing them.
# It releases the job's children when it is a workflow step, as COMPLETE_JOBS does,
# so the release commits with the task's writes too.
COMPLETE_ATOMIC_JOB = f"""/* pgqueue:complete_atomic */
WITH RECURSIVE done AS (
UPDATE {JOB_TABLE} SET
    status = 'succeeded', result = %(result)s::jsonb, locked_until = NULL,
    finished_at = clock_timestamp(), updated_at = clock_timestamp()
WHERE id = %(id)s AND locked_by = %(token)s AND locked_until IS NOT NULL
RETURNING id, status, workflow_id
), {_RELEASE_DONE}
SELECT done.id FROM done WHERE (SELECT pg_catalog.count(*) FROM woken) >= 0
"""

# A paused queue's waiting jobs are not waited for (``--until-empty`` would never
# end), with the COALESCE of the plain claim's (_NOT_MARKED).
_NOT_PAUSED = f"""COALESCE(queue_name <> ALL (ARRAY(
          SELECT q.name FROM {QUEUE_TABLE} AS q WHERE q.paused_at IS NOT NULL)), true)"""

# Any atomic job waiting, due or not (``--until-empty``).
ATOMIC_LEFT = f"""/* pgqueue:atomic_left */
SELECT EXISTS (
    SELECT 1 FROM {JOB_TABLE}
    WHERE atomic AND status IN {CLAIMABLE_SQL}
      AND {IN_QUEUES} AND {_NOT_PAUSED}
      AND {PLAN_EACH_RUN_QUEUES}
)
"""

# Whether an atomic job is due (``--burst``; held ones are in ANY_DUE).
ATOMIC_DUE = f"""/* pgqueue:atomic_due */
SELECT pg_catalog.count(*) FROM (
    SELECT 1 FROM {JOB_TABLE}
    WHERE atomic AND status IN {CLAIMABLE_SQL} AND next_attempt_at <= now()
      AND {IN_QUEUES}
      AND {PLAN_EACH_RUN_LIMIT}
    LIMIT %(limit)s
) AS due
"""

# ---- Plans and table growth ------------------------------------------------------
#
# psycopg prepares a statement after its second run, and after five runs
# PostgreSQL may settle on one *generic* plan per prepared statement. A generic
# plan made while the table was empty (a new, truncated or freshly pruned table,
# its statistics saying "no rows") stays cached as the table grows, until an
# ANALYZE happens to invalidate it: for a join of ``unnest(ids)`` with the table it
# is a hash join, or a nested loop, over a Seq Scan, and every completion then
# reads the whole table (seconds per batch at 100,000 rows, the worker at 100 %
# CPU with no wait event). The claim's sources become a Seq Scan and a sort.
#
# No statement shape avoids it in a generic plan: with the table estimated at
# zero pages a scan of all of it costs nothing, so the planner prefers it to any
# index lookup (``id = ANY(ids)`` or a LATERAL lookup become a Seq Scan with a
# filter just the same). What is robust is planning each run for the table as it
# is: PostgreSQL reads the table's actual size at planning time whatever its
# statistics say, and then chooses the primary-key and partial-index lookups.
# ``SET plan_cache_mode`` is session state, which transaction poolers do not keep
# (tests/faults/test_static.py); unprepared statements are parsed again at every
# run. So every statement a worker runs on a table that grows carries
# PLAN_EACH_RUN (``fragments.plan_each_run``): a condition that is true for every value
# the worker passes, OR an aggregate over a billion-row ``generate_series``. A
# custom plan sees the parameter's value, folds the condition to true and drops
# the aggregate; the generic plan cannot, and carries the aggregate's cost.
# PostgreSQL compares the two after five runs and keeps making custom plans
# (``pg_prepared_statements.generic_plans`` stays 0): the statements stay prepared
# (parsed once) and only planning is redone, 0.1-0.3 ms per statement. Even if a
# generic plan ran, ``OR`` would not evaluate the aggregate.
#
# A custom plan also sees the batch's arrays, and for a batch of hundreds of ids
# it may hash a Seq Scan of the table rather than look each id up. So the arrays
# a statement joins to the table are read through sub-selects, ``unnest((SELECT
# %(ids)s::bigint[]))``: the planner cannot look inside them and estimates 10
# rows whatever the batch, and then one primary-key lookup per row is the
# cheapest plan on any table bigger than a few pages.
#
# tests/test_plans.py runs each statement enough times on an empty analysed
# table for a generic plan to be chosen, grows the table to 20,000 rows and
# checks that the next runs scan none of it sequentially.


# Write the outcomes of a batch of attempts in one statement (coalesced
# completions). ``unnest`` turns parallel arrays into rows, so one round trip
# completes a whole batch whatever its size.
#
# The guard ``locked_by = token AND status = 'in_progress'`` is the fencing
# check: a worker whose lease lapsed and whose row was re-claimed (by another
# host, or another thread of the same process) presents an old token and changes
# nothing. Rows missing from RETURNING are lost leases; the caller logs them.
#
# ``refund`` gives back the attempt counted at claim time when a row is released
# without having run (graceful shutdown, task not importable on this worker).
#
# "Still held" is tested as ``locked_until IS NOT NULL``, which the
# ``lease_iff_running`` CHECK constraint makes equivalent to ``status =
# 'in_progress'``. Written with ``status``, the condition matches the partial
# lease index's predicate and the planner, trusting statistics that say that
# index is nearly empty, scans all of it and hashes the batch against it; under a
# steady drain the index holds every claim since the last VACUUM (dead entries),
# and each completion then reads thousands of them. This form leaves the planner
# one plan: a primary-key lookup per row of the batch.
#
# The completion also releases workflow steps (sql/workflows.py, ``release``): the
# rows it ended come back from the ``done`` CTE, and the children of those that
# are steps are released by the same statement. For plain jobs ``workflow_id`` is
# NULL and the release reads nothing.
#
# COMPLETE_COUNTED_JOBS, the worker's form while the console's rollup is on, also
# adds the batch to the rollup's minutes (sql/rollup.py, ``rollup_add``) in the
# same statement: one round trip and one commit per batch, as without the rollup
# (a transaction around the completion and a second statement cost 7-21 % more
# CPU per job in a drain). The counts come aggregated from the worker, for every
# outcome of the batch, so they are added only if every row was written
# (``ALL_IDS_WRITTEN``, sql/rollup.py); a batch with a lost lease counts nothing here and its
# caller counts what was written (``rollup/store.py``). The marker is the same:
# it is the completion either way.
#
# COMPLETE_PLAIN_JOBS and COMPLETE_PLAIN_COUNTED_JOBS are the same statements
# without the release, for a batch the claim said holds no workflow step
# (``ClaimedJob.step``, from ``workflow_id``, which no statement changes after the
# insert). The release's CTEs read nothing for plain jobs, but PostgreSQL plans
# them at every run (PLAN_EACH_RUN, below): 0.42 of the 0.59 ms that planning the
# counted completion took, about 1.7 µs per job at batches of 250. A batch with
# one step, or an outcome whose job the claim did not describe, takes the full
# statement (jobs/store.py, ``complete``).
def _complete_jobs(count_sql: str = "", *, release: bool = True) -> str:
    release_sql = f", {_RELEASE_DONE}" if release else ""
    woken_sql = " WHERE (SELECT pg_catalog.count(*) FROM woken) >= 0" if release else ""
    return f"""/* pgqueue:complete */
WITH RECURSIVE done AS (
UPDATE {JOB_TABLE} AS j SET
    status = v.status,
    result = CASE WHEN v.status = 'succeeded' THEN v.result::jsonb ELSE j.result END,
    locked_until = NULL,
    finished_at = CASE WHEN v.status IN {TERMINAL_SQL} THEN now()
                       ELSE NULL END,
    next_attempt_at = CASE WHEN v.status IN {CLAIMABLE_SQL}
                           THEN now() + pg_catalog.make_interval(secs => v.delay)
                           ELSE j.next_attempt_at END,
    attempts = j.attempts - v.refund,
    worker_ids = CASE WHEN v.refund > 0
                      THEN j.worker_ids - (pg_catalog.jsonb_array_length(j.worker_ids) - 1)
                      ELSE j.worker_ids END,
    errors = CASE WHEN v.error IS NULL THEN j.errors ELSE j.errors || v.error::jsonb END,
    last_error = COALESCE(v.last_error, j.last_error),
    updated_at = now()
FROM unnest(
    (SELECT %(ids)s::bigint[]), (SELECT %(tokens)s::uuid[]), (SELECT %(statuses)s::text[]),
    (SELECT %(results)s::text[]), (SELECT %(delays)s::float8[]), (SELECT %(errors)s::text[]),
    (SELECT %(last_errors)s::text[]), (SELECT %(refunds)s::int[])
) AS v(id, token, status, result, delay, error, last_error, refund)
WHERE j.id = v.id AND j.locked_by = v.token AND j.locked_until IS NOT NULL
  AND {PLAN_EACH_RUN_IDS}
RETURNING j.id, j.status, j.workflow_id
){release_sql}{count_sql}
SELECT done.id FROM done{woken_sql}
"""


COMPLETE_JOBS = _complete_jobs()
_ROLLED_UP = rollup_add(ALL_IDS_WRITTEN)
_COUNTED = f", rolled_up AS (\n{_ROLLED_UP}\n)"
COMPLETE_COUNTED_JOBS = _complete_jobs(_COUNTED)
COMPLETE_PLAIN_JOBS = _complete_jobs(release=False)
COMPLETE_PLAIN_COUNTED_JOBS = _complete_jobs(_COUNTED, release=False)

# Settle an ambiguous commit and extend leases (fragments.py). Extending a job's
# lease also says whether an operator asked to abort it (operations' ``abort``):
# the worker learns of an abort from the statement it runs every third of a
# lease anyway, so aborting costs the hot path nothing.
READ_OUTCOMES = read_outcomes("read_outcomes", JOB_TABLE)
EXTEND_JOB_LEASES = extend_leases(
    "extend_job_leases", JOB_TABLE, also_return_sql=", j.abort_requested_at IS NOT NULL"
)


# Is anything due now or held by anyone? Used by ``--burst`` to decide to exit.
# Atomic jobs are the atomic source's to answer for (ATOMIC_DUE).
#
# Each test reads one row in the order of its partial index (the due index, the
# lease index) rather than ``EXISTS``: statistics made while the table was empty
# guess that thousands of rows match, and an ``EXISTS`` then prefers a Seq Scan
# that "stops at the first match", which reads every finished row when none
# does. An ordered ``LIMIT 1`` is a sort of all matches for a scan and one index
# descent for the index, whatever the statistics say.


def _any_waiting(due_sql: str) -> str:
    """Whether a waiting job (``due_sql``: and due now) of a queue not paused, or a
    held one, exists."""
    return f"""(SELECT true FROM {JOB_TABLE}
    WHERE status IN {CLAIMABLE_SQL}{due_sql}
      AND {IN_QUEUES} AND {_NOT_PAUSED}
      AND {PLAN_EACH_RUN_QUEUES}
    ORDER BY priority DESC, next_attempt_at, id LIMIT 1) IS NOT NULL
OR (SELECT true FROM {JOB_TABLE}
    WHERE status = 'in_progress' AND {IN_QUEUES}
    ORDER BY locked_until LIMIT 1) IS NOT NULL"""


_ANY_DUE = _any_waiting(" AND next_attempt_at <= now() AND NOT atomic")
ANY_DUE = f"/* pgqueue:any_due */\nSELECT {_ANY_DUE}"

# Is anything left at all: pending or failed (due now or later) or held? Used by
# ``--until-empty``, which also waits for scheduled retries and deferred jobs.
_ANY_LEFT = _any_waiting("")
ANY_LEFT = f"/* pgqueue:any_left */\nSELECT {_ANY_LEFT}"

# Make every scheduled retry due now (django_pgqueue.testing: a test does not
# wait for a backoff). Only ``failed`` rows: deferred jobs keep their run_after.
RETRIES_DUE_NOW = f"""/* pgqueue:retries_due_now */
UPDATE {JOB_TABLE} AS j SET next_attempt_at = now()
WHERE status = 'failed' AND next_attempt_at > now()
  AND {IN_QUEUES}
"""

#: What ``get_result`` reads of a job: the columns of ``jobs.rows.JobRow``, the one
#: list GET_JOB's select list and the row decoder are built from.
JOB_ROW_COLUMNS: tuple[str, ...] = (
    "id",
    "status",
    "task_path",
    "args",
    "kwargs",
    "queue_name",
    "priority",
    "backend",
    "next_attempt_at",
    "created_at",
    "started_at",
    "last_attempted_at",
    "finished_at",
    "errors",
    "worker_ids",
    "result",
    "progress",
    "progress_message",
    "progress_at",
    "workflow_id",
    "step_name",
    "attempts",
    "max_attempts",
)

_JOB_ROW_NAMES = ", ".join(JOB_ROW_COLUMNS)

# Read one job for ``get_result`` (Django cursor).
GET_JOB = f"""/* pgqueue:get_result */
SELECT {_JOB_ROW_NAMES}
FROM {JOB_TABLE} WHERE id = %s
"""

# A running task's progress (``context.set_progress``), throttled by the caller.
# Guarded like a completion (the attempt's token, still held), so an attempt whose
# lease was lost cannot write over the progress of the one that took the row. Run
# on the task thread's Django connection; the statement touches no index column,
# so it is a HOT update of one row.
SET_PROGRESS = f"""/* pgqueue:set_progress */
UPDATE {JOB_TABLE}
SET progress = %s, progress_message = %s, progress_at = now()
WHERE id = %s AND locked_by = %s AND locked_until IS NOT NULL
"""

# Wake idle workers: (channel, payload), the payload naming the worker source with
# new work (notify.WAKE_*). PostgreSQL folds identical notifications of one
# transaction into one.
NOTIFY = "/* pgqueue:notify */ SELECT pg_catalog.pg_notify(%s, %s)"

# ---------------------------------------------------------------------------------
# Tracing (``PGQUEUE["TRACING"]``: tracing.py, through jobs/store.py)
#
# The enqueue span's W3C context is written into the new row by a second statement
# in the caller's transaction, rather than by INSERT_JOB itself: with tracing off
# (the default) the enqueue statement stays as it is, prepared and unchanged.
STORE_TRACE_CONTEXT = f"""/* pgqueue:store_trace_context */
UPDATE {JOB_TABLE} AS j SET trace_context = %s::jsonb WHERE j.id = %s
"""

# The stored contexts of the jobs one claim took, in one statement over the claim
# connection (primary-key lookups), so each run can continue its enqueue trace.
READ_TRACE_CONTEXTS = f"""/* pgqueue:read_trace_contexts */
SELECT id, trace_context FROM {JOB_TABLE}
WHERE id = ANY((SELECT %(ids)s::bigint[])::bigint[]) AND trace_context IS NOT NULL
  AND {PLAN_EACH_RUN_IDS}
"""
