"""Every raw SQL statement of the job queue, named, with why it is shaped so.

Rules kept by every statement here:

* Values are always parameters; identifiers come from ``_meta.db_table`` only.
* Time is always the database clock (``now()`` is the statement's start in the
  autocommit sessions the worker uses), never the application's: hosts with a
  skewed clock can neither reclaim early nor hold a lease forever.
* Worker statements are single autocommit statements, so no transaction is ever
  held open across user code or HTTP.
* Each statement starts with a ``/* pgqueue:<name> */`` marker so it can be
  found in ``pg_stat_statements`` and targeted by fault-injection tests.

Statements for the worker use psycopg's ``%(name)s`` placeholders; those run on a
Django cursor (enqueue, results) use positional ``%s``.
"""

from __future__ import annotations

import datetime as dt

JOB_TABLE = "pgqueue_job"

#: Columns a worker needs to run a claimed job.
_CLAIM_RETURNING = """
    j.id, j.status, j.locked_by, j.attempts, j.max_attempts, j.task_path,
    j.args, j.kwargs, j.queue_name, j.priority, j.backend, j.created_at,
    j.started_at, j.last_attempted_at, j.errors, j.worker_ids
"""

# Enqueue one job inside the caller's transaction (Django cursor).
# ``now()`` is the caller's transaction start, which is what "enqueued at" means.
# The row is due at ``run_after`` or at once.
INSERT_JOB = f"""/* pgqueue:enqueue */
INSERT INTO {JOB_TABLE} (
    status, priority, attempts, max_attempts, next_attempt_at, worker_id,
    last_error, errors, created_at, updated_at, task_path, queue_name, backend,
    args, kwargs, worker_ids
) VALUES (
    'pending', %s, 0, %s, COALESCE(%s, now()), '', '', '[]', now(), now(),
    %s, %s, %s, %s::jsonb, %s::jsonb, '[]'
)
RETURNING id, created_at
"""

# Enqueue one unique or atomic job (Django cursor). INSERT_JOB's row plus the
# unique key and the atomic flag. A live job of the same task with the same key
# wins: ``ON CONFLICT`` names the partial unique index ``pgq_job_unique_live`` by
# its columns and predicate (written as in the index so PostgreSQL infers it), a
# concurrent enqueue of the same key waits for the first transaction and then
# inserts nothing. No row back means "a live job holds the key" (LIVE_JOB_WITH_KEY
# then reads it, with a fresh snapshot). Rows without a key never conflict.
INSERT_KEYED_JOB = f"""/* pgqueue:enqueue_keyed */
INSERT INTO {JOB_TABLE} (
    status, priority, attempts, max_attempts, next_attempt_at, worker_id,
    last_error, errors, created_at, updated_at, task_path, queue_name, backend,
    args, kwargs, worker_ids, unique_key, atomic
) VALUES (
    'pending', %s, 0, %s, COALESCE(%s, now()), '', '', '[]', now(), now(),
    %s, %s, %s, %s::jsonb, %s::jsonb, '[]', %s, %s
)
ON CONFLICT (task_path, unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('pending', 'in_progress', 'failed')
DO NOTHING
RETURNING id, created_at
"""

# The live job holding a unique key (the partial unique index answers it).
LIVE_JOB_WITH_KEY = f"""/* pgqueue:live_job_with_key */
SELECT id FROM {JOB_TABLE}
WHERE task_path = %s AND unique_key = %s AND status IN ('pending', 'in_progress', 'failed')
"""

# Reserve ids for a bulk enqueue. ``INSERT ... RETURNING`` does not promise to
# return rows in input order, so ids are drawn first and written explicitly: the
# caller then knows which result belongs to which argument list, and the same
# rows can go through COPY for large batches. One row holding an array (in draw
# order, which keeps a batch's jobs FIFO) rather than a row per id: decoding
# thousands of rows, each with its own timestamp, cost more than the COPY itself.
RESERVE_JOB_IDS = f"""/* pgqueue:reserve_ids */
SELECT ARRAY(
    SELECT nextval(pg_get_serial_sequence('{JOB_TABLE}', 'id'))
    FROM generate_series(1, %s) ORDER BY 1
), now()
"""

# Bulk enqueue of many jobs of one task in one statement (arrays, not a VALUES
# list: the statement text stays the same whatever the batch size).
INSERT_JOBS = f"""/* pgqueue:enqueue_many */
INSERT INTO {JOB_TABLE} (
    id, status, priority, attempts, max_attempts, next_attempt_at, worker_id,
    last_error, errors, created_at, updated_at, task_path, queue_name, backend,
    args, kwargs, worker_ids
)
SELECT t.id, 'pending', %s, 0, %s, COALESCE(%s, now()), '', '', '[]', now(), now(),
       %s, %s, %s, t.a::jsonb, t.k::jsonb, '[]'
FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS t(id, a, k)
"""

# The same rows through COPY (text format), for large batches (several times
# faster than an INSERT). The columns that differ per row come first and the rest
# are the same in every row, so the caller formats that tail once per batch and
# each row is its id, its arguments and the tail (backend.copy_line).
COPY_JOBS = f"""COPY {JOB_TABLE} (
    id, args, kwargs, status, priority, attempts, max_attempts, next_attempt_at,
    worker_id, last_error, errors, created_at, updated_at, task_path, queue_name,
    backend, worker_ids
) FROM STDIN"""

# Claim up to ``limit`` jobs in one statement.
#
# * Two sources: rows whose lease lapsed (their worker died) and due rows. Lapsed
#   leases are taken first: there are few of them and the partial lease index
#   answers "any lease older than now()?" by reading one entry, so this costs
#   nothing when nobody crashed, while putting them last could starve them.
# * Each source is a ``MATERIALIZED`` CTE: with the plain
#   ``WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED LIMIT n)`` form the planner
#   may run the subquery once per outer row and lock more than ``n`` rows
#   (PostgreSQL bug #15715). A materialized CTE is evaluated exactly once.
# * ``SKIP LOCKED`` lets concurrent workers claim disjoint rows without waiting.
# * ``attempts`` is counted here, at claim time: a task that kills its worker
#   still uses up an attempt, so it cannot crash-loop the fleet forever. A lapsed
#   row that has no attempts left goes to ``dead`` in this same statement instead
#   of being run again (status 'dead' in RETURNING; the worker skips it). So does
#   a lapsed row an operator asked to abort, which goes to ``cancelled``.
# * ``locked_by`` gets a fresh random token per claim: the fencing token every
#   later write of this attempt must present.
# * The due source reads the ``(priority DESC, next_attempt_at, id)`` partial
#   index in order; terminal rows are not in it, so history does not slow it.
#   Atomic jobs are left to the atomic claim (CLAIM_ATOMIC_JOB), which runs them
#   inside its own transaction; they are a filter here, not a condition of the
#   index, because they are expected to be a small share of the due rows.
# * The picked ids are folded into arrays and joined back through ``unnest``. The
#   planner cannot estimate a ``LIMIT`` that is a parameter or an expression and
#   assumes a tenth of the due rows; joining a CTE of that size makes it hash the
#   whole table (a sequential scan per claim: 40 ms at 20,000 rows, growing with
#   history). ``unnest`` of a parameter-sized array is estimated at 100 rows,
#   which keeps the join a primary-key lookup per claimed row, as long as the
#   plan is made for the table's actual size (see "Plans and table growth").
CLAIM_JOBS = f"""/* pgqueue:claim */
WITH lapsed AS MATERIALIZED (
    SELECT id, attempts >= max_attempts OR abort_requested_at IS NOT NULL AS exhausted
    FROM {JOB_TABLE}
    WHERE status = 'in_progress' AND locked_until < now()
      AND (%(all_queues)s OR queue_name = ANY(%(queues)s))
    ORDER BY locked_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), due AS MATERIALIZED (
    SELECT id FROM {JOB_TABLE}
    WHERE status IN ('pending', 'failed') AND next_attempt_at <= now() AND NOT atomic
      AND (%(all_queues)s OR queue_name = ANY(%(queues)s))
    ORDER BY priority DESC, next_attempt_at, id
    LIMIT %(limit)s - (SELECT count(*) FROM lapsed)
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT array_agg(id) AS ids, array_agg(exhausted) AS exhausted,
           array_agg(lapsed) AS lapsed
    FROM (
        SELECT id, exhausted, true AS lapsed FROM lapsed
        UNION ALL
        SELECT id, false, false FROM due
    ) AS both_sources
)
UPDATE {JOB_TABLE} AS j SET
    status = CASE WHEN NOT p.exhausted THEN 'in_progress'
                  WHEN j.abort_requested_at IS NOT NULL THEN 'cancelled'
                  ELSE 'dead' END,
    attempts = CASE WHEN p.exhausted THEN j.attempts ELSE j.attempts + 1 END,
    locked_by = CASE WHEN p.exhausted THEN j.locked_by ELSE gen_random_uuid() END,
    locked_until = CASE WHEN p.exhausted THEN NULL
                        ELSE now() + make_interval(secs => %(lease)s) END,
    worker_id = CASE WHEN p.exhausted THEN j.worker_id ELSE %(worker_id)s END,
    worker_ids = CASE WHEN p.exhausted THEN j.worker_ids
                      ELSE j.worker_ids || to_jsonb(%(worker_id)s::text) END,
    started_at = COALESCE(j.started_at, now()),
    last_attempted_at = CASE WHEN p.exhausted THEN j.last_attempted_at ELSE now() END,
    finished_at = CASE WHEN p.exhausted THEN now() ELSE NULL END,
    errors = CASE WHEN p.lapsed THEN j.errors || jsonb_build_object(
                 'attempt', j.attempts,
                 'exception_class_path', 'django_pgqueue.exceptions.LeaseExpired',
                 'traceback', 'Lease expired: worker ' || j.worker_id
                     || ' stopped renewing it (it crashed, was killed or lost the database).',
                 'at', now(),
                 'worker_id', j.worker_id)
             ELSE j.errors END,
    last_error = CASE WHEN p.lapsed THEN 'LeaseExpired: worker ' || j.worker_id
                          || ' stopped renewing its lease (worker died?)'
                      ELSE j.last_error END,
    updated_at = now()
FROM picked, unnest(picked.ids, picked.exhausted, picked.lapsed) AS p(id, exhausted, lapsed)
WHERE j.id = p.id
RETURNING {_CLAIM_RETURNING}
"""

# ---- Atomic jobs (worker/atomic.py) ----------------------------------------------
#
# An atomic job is claimed, run and completed in ONE transaction on the queue
# database (Django cursor, ``%(name)s``): its row stays locked by that
# transaction the whole time, so no lease, no ``in_progress`` and nothing for
# other workers to reclaim. A crash rolls the claim back with the task's writes.

# Bound the transaction. ``statement_timeout`` stops a statement that runs too
# long and ``idle_in_transaction_session_timeout`` ends a session whose task sits
# between statements (sleeping, HTTP) too long; both only for this transaction.
ATOMIC_TIMEOUTS = """/* pgqueue:atomic_timeouts */
SELECT set_config('statement_timeout', %(ms)s, true),
       set_config('idle_in_transaction_session_timeout', %(ms)s, true)
"""

# Claim one due atomic job and keep it locked until the transaction ends. Shaped
# like CLAIM_JOBS's due source (a MATERIALIZED CTE with SKIP LOCKED, reading the
# ``pgq_job_atomic_due_idx`` partial index in order), but the row keeps its state:
# the attempt and token counted here commit only if the job finishes.
CLAIM_ATOMIC_JOB = f"""/* pgqueue:claim_atomic */
WITH picked AS MATERIALIZED (
    SELECT id FROM {JOB_TABLE}
    WHERE atomic AND status IN ('pending', 'failed') AND next_attempt_at <= now()
      AND (%(all_queues)s OR queue_name = ANY(%(queues)s))
    ORDER BY priority DESC, next_attempt_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE {JOB_TABLE} AS j SET
    attempts = j.attempts + 1,
    locked_by = gen_random_uuid(),
    worker_id = %(worker_id)s,
    worker_ids = j.worker_ids || to_jsonb(%(worker_id)s::text),
    started_at = COALESCE(j.started_at, now()),
    last_attempted_at = now(),
    updated_at = now()
FROM picked WHERE j.id = picked.id
RETURNING {_CLAIM_RETURNING}
"""

# Success, in the claim's transaction: it commits with the task's own writes.
COMPLETE_ATOMIC_JOB = f"""/* pgqueue:complete_atomic */
UPDATE {JOB_TABLE} SET
    status = 'succeeded', result = %(result)s::jsonb, finished_at = clock_timestamp(),
    updated_at = clock_timestamp()
WHERE id = %(id)s AND locked_by = %(token)s
"""

# A failed attempt, recorded in its own short transaction after the task's
# transaction rolled back (taking the claim's attempt count with it). Counted
# again here; ``attempts = %(before)s`` makes it a no-op if another worker ran
# the job in between.
RECORD_ATOMIC_FAILURE = f"""/* pgqueue:atomic_failure */
UPDATE {JOB_TABLE} SET
    status = %(status)s,
    attempts = attempts + 1,
    locked_by = %(token)s,
    worker_id = %(worker_id)s,
    worker_ids = worker_ids || to_jsonb(%(worker_id)s::text),
    started_at = COALESCE(started_at, now()),
    last_attempted_at = now(),
    next_attempt_at = CASE WHEN %(status)s = 'failed'
                           THEN now() + make_interval(secs => %(delay)s)
                           ELSE next_attempt_at END,
    finished_at = CASE WHEN %(status)s = 'dead' THEN now() END,
    errors = errors || %(error)s::jsonb,
    last_error = %(last_error)s,
    updated_at = now()
WHERE id = %(id)s AND attempts = %(before)s AND status IN ('pending', 'failed')
"""

# Any atomic job waiting, due or not (``--until-empty``).
ATOMIC_LEFT = f"""/* pgqueue:atomic_left */
SELECT EXISTS (
    SELECT 1 FROM {JOB_TABLE}
    WHERE atomic AND status IN ('pending', 'failed')
      AND (%(all_queues)s OR queue_name = ANY(%(queues)s))
)
"""

# Whether an atomic job is due (the atomic source's claim sizing and ``--burst``).
ATOMIC_DUE = f"""/* pgqueue:atomic_due */
SELECT count(*) FROM (
    SELECT 1 FROM {JOB_TABLE}
    WHERE atomic AND status IN ('pending', 'failed') AND next_attempt_at <= now()
      AND (%(all_queues)s OR queue_name = ANY(%(queues)s))
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
# is a hash join over a Seq Scan, and every completion then reads the whole table
# (seconds per batch at 100,000 rows, the worker at 100 % CPU with no wait event).
# The claim's sources become a Seq Scan and a sort the same way.
#
# No statement shape avoids it: with the table estimated at zero pages a scan of
# all of it costs nothing, so the planner prefers it to any index lookup
# (``id = ANY(ids)`` or a LATERAL lookup become a Seq Scan with a filter just the
# same), and ``enable_seqscan = off`` only turns the hash join's input into a full
# index scan. What is robust is planning each run for the table as it is:
# PostgreSQL reads the table's actual size at planning time whatever its
# statistics say, and then chooses the primary-key and partial-index lookups.
# ``SET plan_cache_mode = force_custom_plan`` is session state, which transaction
# poolers do not keep (tests/faults/test_static.py); sending the statements
# unprepared re-parses a claim at every run (1-4 ms on a loaded 2-core machine,
# which drained 20 times slower).
#
# Not solved yet: the worker's statements keep PostgreSQL's plan cache, so the
# hazard above is still there until the next ANALYZE (tests/test_plans.py holds
# it as known failures). Tried and measured: making PostgreSQL plan the completion
# and the lease extension at every run (a condition a custom plan folds away and a
# generic plan must cost as a billion-row aggregate) is pooler-safe, but a custom
# plan sees each batch's real size and, for batches of hundreds, hashes a Seq Scan
# of the table on its own: pgqueue_bench's drain fell from ~9,000 to ~400 jobs/s.
# Planning the claim at every run costs a millisecond per small batch. The next
# step is both: per-run plans with the arrays' sizes hidden from the planner
# (``unnest`` of sub-selects, estimated at the generic plan's 10 rows).

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
COMPLETE_JOBS = f"""/* pgqueue:complete */
UPDATE {JOB_TABLE} AS j SET
    status = v.status,
    result = CASE WHEN v.status = 'succeeded' THEN v.result::jsonb ELSE j.result END,
    locked_until = NULL,
    finished_at = CASE WHEN v.status IN ('succeeded', 'dead', 'cancelled') THEN now()
                       ELSE NULL END,
    next_attempt_at = CASE WHEN v.status IN ('failed', 'pending')
                           THEN now() + make_interval(secs => v.delay)
                           ELSE j.next_attempt_at END,
    attempts = j.attempts - v.refund,
    worker_ids = CASE WHEN v.refund > 0
                      THEN j.worker_ids - (jsonb_array_length(j.worker_ids) - 1)
                      ELSE j.worker_ids END,
    errors = CASE WHEN v.error IS NULL THEN j.errors ELSE j.errors || v.error::jsonb END,
    last_error = COALESCE(v.last_error, j.last_error),
    updated_at = now()
FROM unnest(
    %(ids)s::bigint[], %(tokens)s::uuid[], %(statuses)s::text[], %(results)s::text[],
    %(delays)s::float8[], %(errors)s::text[], %(last_errors)s::text[], %(refunds)s::int[]
) AS v(id, token, status, result, delay, error, last_error, refund)
WHERE j.id = v.id AND j.locked_by = v.token AND j.locked_until IS NOT NULL
RETURNING j.id
"""

# After an ambiguous commit (the connection died while COMMIT's reply was in
# flight) the worker asks what the rows hold: a row whose ``locked_by`` is still
# its token and whose status is no longer in_progress was written by it.
READ_OUTCOMES = f"""/* pgqueue:read_outcomes */
SELECT id, status, locked_by FROM {JOB_TABLE}
WHERE id = ANY(%(ids)s::bigint[])
"""

# Extend the leases of every row this process still holds, guarded by token like
# a completion (and, like it, without naming ``status``). Rows missing from
# RETURNING were lost (re-claimed after a lapse).
EXTEND_LEASES = f"""/* pgqueue:extend_leases */
UPDATE {JOB_TABLE} AS j SET
    locked_until = now() + make_interval(secs => %(lease)s)
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS v(id, token)
WHERE j.id = v.id AND j.locked_by = v.token AND j.locked_until IS NOT NULL
RETURNING j.id
"""

# EXTEND_LEASES for jobs, which also says which held rows an operator asked to
# abort (operations' ``abort``): the worker learns of an abort from the statement it
# runs every third of a lease anyway, so aborting costs the hot path nothing.
EXTEND_JOB_LEASES = EXTEND_LEASES.replace(
    "/* pgqueue:extend_leases */", "/* pgqueue:extend_job_leases */"
).replace("RETURNING j.id\n", "RETURNING j.id, j.abort_requested_at IS NOT NULL\n")

# Is anything due now or held by anyone? Used by ``--burst`` to decide to exit.
# Atomic jobs are the atomic source's to answer for (ATOMIC_DUE).
ANY_DUE = f"""/* pgqueue:any_due */
SELECT EXISTS (
    SELECT 1 FROM {JOB_TABLE}
    WHERE status IN ('pending', 'failed') AND next_attempt_at <= now() AND NOT atomic
      AND (%(all_queues)s OR queue_name = ANY(%(queues)s))
) OR EXISTS (
    SELECT 1 FROM {JOB_TABLE}
    WHERE status = 'in_progress'
      AND (%(all_queues)s OR queue_name = ANY(%(queues)s))
)
"""

# Is anything left at all: pending or failed (due now or later) or held? Used by
# ``--until-empty``, which also waits for scheduled retries and deferred jobs.
ANY_LEFT = f"""/* pgqueue:any_left */
SELECT EXISTS (
    SELECT 1 FROM {JOB_TABLE}
    WHERE status IN ('pending', 'failed', 'in_progress')
      AND (%(all_queues)s OR queue_name = ANY(%(queues)s))
)
"""

# Make every scheduled retry due now (django_pgqueue.testing: a test does not
# wait for a backoff). Only ``failed`` rows: deferred jobs keep their run_after.
RETRIES_DUE_NOW = f"""/* pgqueue:retries_due_now */
UPDATE {JOB_TABLE} AS j SET next_attempt_at = now()
WHERE status = 'failed' AND next_attempt_at > now()
  AND (%(all_queues)s OR queue_name = ANY(%(queues)s))
"""

# Read one job for ``get_result`` (Django cursor).
GET_JOB = f"""/* pgqueue:get_result */
SELECT id, status, task_path, args, kwargs, queue_name, priority, backend,
       next_attempt_at, created_at, started_at, last_attempted_at, finished_at,
       errors, worker_ids, result
FROM {JOB_TABLE} WHERE id = %s
"""

# Wake idle workers. ``pg_notify`` with a constant payload: PostgreSQL folds
# identical notifications of one transaction into one.
NOTIFY = "/* pgqueue:notify */ SELECT pg_notify(%s, '')"


def operator_update(table: str, set_clause: str) -> str:
    """An operator action (replay, retry, cancel, move to DLQ) as one guarded UPDATE.

    ``old`` locks exactly the requested rows that are in one of the allowed
    states (never ``in_progress``: a row a worker holds is skipped), so a double
    submit changes nothing the second time, and RETURNING reports each changed
    row with the state it left (for the audit log).
    """
    return f"""/* pgqueue:operator */
WITH old AS MATERIALIZED (
    SELECT id, status FROM {table}
    WHERE id = ANY(%s) AND status = ANY(%s)
    FOR UPDATE
)
UPDATE {table} AS t SET {set_clause}, updated_at = now()
FROM old WHERE t.id = old.id
RETURNING t.id, old.status
"""


# The planner's row estimate of a whole table, for admin changelists on big
# tables: ``COUNT(*)`` reads every row, ``reltuples`` is kept by VACUUM/ANALYZE
# and costs one catalogue lookup. -1 (never analysed) means "unknown".
ESTIMATED_ROWS = """/* pgqueue:estimated_rows */
SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)
"""

# The queue dashboard in one pass over the job table: per queue and state the
# row count, the oldest due time of claimable rows (how far behind the workers
# are), how many held rows have a lapsed lease (stuck: their worker died) and
# how many waiting rows are due now (the rest are deferred: ``run_after`` or a
# scheduled retry). ``now()`` comes back with the rows so ages are measured on
# the database clock.
JOB_OVERVIEW = f"""/* pgqueue:overview */
SELECT queue_name, status, count(*),
       min(next_attempt_at) FILTER (
           WHERE status IN ('pending', 'failed') AND next_attempt_at <= now()),
       count(*) FILTER (WHERE status = 'in_progress' AND locked_until < now()),
       now(),
       count(*) FILTER (WHERE status IN ('pending', 'failed') AND next_attempt_at <= now())
FROM {JOB_TABLE}
GROUP BY queue_name, status
ORDER BY queue_name, status
"""

# The webhook half of the dashboard in one pass: every endpoint (its switch and
# circuit) with its deliveries per state, the oldest due time and lapsed leases.
# LEFT JOIN so an endpoint without deliveries still shows. The application's uid
# (a subquery by primary key) groups the endpoints that are not delivering.
DELIVERY_OVERVIEW = """/* pgqueue:delivery_overview */
SELECT e.id, e.url, e.is_active, e.breaker_state, e.open_until, e.disabled_reason,
       (SELECT a.uid FROM pgqueue_application AS a WHERE a.id = e.application_id),
       d.status, count(d.id),
       min(d.next_attempt_at) FILTER (
           WHERE d.status IN ('pending', 'failed') AND d.next_attempt_at <= now()),
       count(d.id) FILTER (WHERE d.status = 'in_progress' AND d.locked_until < now()),
       now(),
       count(d.id) FILTER (
           WHERE d.status IN ('pending', 'failed') AND d.next_attempt_at <= now())
FROM pgqueue_endpoint AS e LEFT JOIN pgqueue_delivery AS d ON d.endpoint_id = e.id
GROUP BY e.id, d.status
ORDER BY e.id, d.status
"""


def endpoint_update(table: str, guard: str, set_clause: str) -> str:
    """An operator change to endpoints (enable, disable, reset the circuit).

    Shaped like :func:`operator_update`: ``old`` locks the requested endpoints the
    change applies to (``guard``), so a repeated click changes nothing, and
    RETURNING reports the state each endpoint left, for the audit log.
    """
    return f"""/* pgqueue:endpoint_operator */
WITH old AS MATERIALIZED (
    SELECT id, is_active, breaker_state FROM {table}
    WHERE id = ANY(%s) AND ({guard})
    FOR UPDATE
)
UPDATE {table} AS t SET {set_clause}, updated_at = now()
FROM old WHERE t.id = old.id
RETURNING t.id,
    CASE WHEN old.is_active THEN 'enabled' ELSE 'disabled' END
    || ', circuit ' || old.breaker_state
"""


# ---------------------------------------------------------------------------------
# Webhook deliveries
#
# Events fan out to deliveries in the caller's transaction (Django cursor, ``%s``);
# the worker claims, completes and extends deliveries exactly as it does jobs
# (psycopg connections, ``%(name)s``), plus two things jobs do not have: each
# endpoint's circuit breaker, changed only by single UPDATEs so concurrent workers
# never lose a count, and the attempt log, written by the statement that writes
# the attempt's outcome so an attempt is logged if and only if its outcome is.
# ---------------------------------------------------------------------------------

APPLICATION_TABLE = "pgqueue_application"
ENDPOINT_TABLE = "pgqueue_endpoint"
EVENT_TABLE = "pgqueue_event"
DELIVERY_TABLE = "pgqueue_delivery"
ATTEMPT_TABLE = "pgqueue_delivery_attempt"

# A disabled endpoint's waiting deliveries are "parked": a trigger on the endpoint
# table (migration 0004) moves their ``next_attempt_at`` to this instant when
# ``is_active`` goes false and back to now when it goes true, however the flag is
# changed. Parked rows lie beyond every ``next_attempt_at <= now()`` range the
# claim reads, so a big backlog on a disabled endpoint costs the claim nothing.
# Parking is an optimisation, never a condition of correctness: the claim still
# checks ``is_active``, so a row a race leaves unparked only costs a scan.
PARKED_AT = dt.datetime(9999, 1, 1, tzinfo=dt.UTC)
_PARKED = "TIMESTAMPTZ '9999-01-01 00:00:00+00'"  # PARKED_AT, as SQL

# One event, in the caller's transaction. With an idempotency key, a second send
# (even a concurrent one: ON CONFLICT waits for the first transaction) inserts
# nothing and returns no row; the caller then reads the first event. ``payload``
# is parsed from the very text stored in ``body``, the bytes that get signed.
INSERT_EVENT = f"""/* pgqueue:insert_event */
INSERT INTO {EVENT_TABLE} (
    event_type, payload, body, msg_id, idempotency_key, application_id, channels, created_at)
VALUES (%s, %s::jsonb, %s, %s, %s, %s, %s::jsonb, now())
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id, created_at
"""

# The application ``send_event(application=uid)`` names, and whether it is active.
SELECT_APPLICATION = f"""/* pgqueue:select_application */
SELECT id, is_active FROM {APPLICATION_TABLE} WHERE uid = %s
"""

# One delivery per active endpoint subscribed to the event, in one set-based
# statement: the cost is one round trip whatever the number of endpoints.
# * Tenancy: the endpoints of the event's application, or the global ones
#   (application NULL) for an event sent without one. The two shapes are two
#   statements rather than ``IS NOT DISTINCT FROM`` (which no index answers): each
#   is one range of ``pgq_ep_app_idx``, so the cost follows the endpoints of
#   that application and not the number of applications.
# * Type: an empty ``event_types`` subscribes to everything; otherwise it holds the
#   type or one of its wildcards (``order.*``): the caller passes the type and its
#   wildcards (routing.subscription_keys) and ``?|`` asks for any of them.
# * Channels: an endpoint without channels takes every event; one with channels
#   only events that carry one of them.
# A FIFO endpoint's delivery gets its ordering key here ('' puts all of an
# endpoint's deliveries in one line; a keyed endpoint's deliveries without a key
# are not ordered).
_FAN_OUT = f"""/* pgqueue:fan_out */
INSERT INTO {DELIVERY_TABLE} (
    event_id, endpoint_id, status, priority, attempts, max_attempts, next_attempt_at,
    worker_id, last_error, errors, created_at, updated_at, ordering_key
)
SELECT %(event_id)s, e.id, 'pending', 0, 0, %(max_attempts)s, now(), '', '', '[]', now(),
       now(), CASE e.ordering WHEN 'endpoint' THEN '' WHEN 'key' THEN %(ordering_key)s END
FROM {ENDPOINT_TABLE} AS e
WHERE e.is_active AND {{tenant}}
  AND (e.event_types = '[]'::jsonb OR e.event_types ?| %(type_keys)s::text[])
  AND (e.channels = '[]'::jsonb OR e.channels ?| %(channels)s::text[])
"""
INSERT_DELIVERIES = _FAN_OUT.format(tenant="e.application_id IS NULL")
INSERT_APPLICATION_DELIVERIES = _FAN_OUT.format(tenant="e.application_id = %(application_id)s")

# Delivery ``d`` may go now as far as FIFO ordering goes: it has no ordering key,
# or it is the head of its key (no older delivery of the key waiting or in flight)
# and nothing of its key is in flight (a replayed older delivery waits for a
# newer one already out). Answered by ``pgq_dlv_fifo_idx``, which holds only
# FIFO deliveries that are not finished.
_FIFO_HEAD = f"""(d.ordering_key IS NULL OR NOT EXISTS (
              SELECT 1 FROM {DELIVERY_TABLE} AS o
              WHERE o.endpoint_id = d.endpoint_id AND o.ordering_key = d.ordering_key
                AND o.status IN ('pending', 'failed', 'in_progress') AND o.id <> d.id
                AND (o.id < d.id OR o.status = 'in_progress')))"""

# Deliveries of endpoint ``e`` in flight (claimed, not yet completed), through the
# small partial index ``pgq_dlv_flight_idx``: prefetched rows a worker holds count.
_IN_FLIGHT = f"""SELECT count(*) FROM {DELIVERY_TABLE} AS f
               WHERE f.endpoint_id = e.id AND f.status = 'in_progress'"""

# Requests endpoint ``e`` may start now under its rate limit (NULL: no limit): the
# generic cell rate algorithm, a token bucket kept as one timestamp. ``rate_tat``
# (the theoretical arrival time) moves on by ``rate_period / rate_limit`` per
# request; a bucket of ``rate_limit`` requests fills back at ``rate_limit`` per
# ``rate_period``. One column, written only under the endpoint's row lock by the
# claim, so it holds across processes and hosts. The epsilon absorbs float
# rounding of the interval arithmetic.
_RATE_ALLOWANCE = """CASE WHEN e.rate_limit IS NOT NULL THEN GREATEST(0, floor(
        e.rate_limit - GREATEST(0, extract(epoch FROM e.rate_tat - now()))
                       * e.rate_limit / e.rate_period + 0.000001))::int END"""

# Claim up to ``limit`` deliveries: CLAIM_JOBS's shape (materialized CTEs, SKIP
# LOCKED, lapsed leases first, attempts counted here, fresh token), plus the
# breaker and fair, throttled claiming across endpoints (docs/webhooks.md,
# "Fairness").
#
# * ``due`` only takes deliveries of active endpoints whose circuit is closed: an
#   open or disabled endpoint's deliveries stay as they are, attempts unburnt.
# * ``probe_endpoints`` / ``probes`` / ``half_opened``: an open circuit whose
#   cool-down is over sends exactly one probe. The endpoint row is locked with
#   SKIP LOCKED and moved to ``half_open`` in this statement, so a concurrent
#   claim either skips the locked row or, once this commits, no longer matches
#   ``open_until <= now()``. ``open_until`` then bounds the probe (a lease): if its
#   worker dies, the next claim after that sends a new probe.
# * A lapsed delivery whose endpoint is no longer sendable is not run: it goes
#   back to ``failed``, due at once, and waits for its endpoint like the others.
# * A lapsed attempt is written to the attempt log here (the worker that made it
#   died before it could), so the log shows every attempt that may have reached
#   the receiver.
#
# Fairness and limits, without reading the backlog:
#
# * ``busy``: the endpoints that have waiting deliveries, by a skip scan of the
#   due index ``(endpoint_id, next_attempt_at, id)``: one index descent per such
#   endpoint, however many deliveries each one holds. (PostgreSQL 15 has no skip
#   scan of its own; the recursive CTE is the classic loose index scan.) Ordering
#   by ``(endpoint_id, next_attempt_at)`` matches only the due index, so the planner
#   cannot walk the foreign key's index instead, which also holds every finished
#   delivery.
# * ``candidates``: of those, the endpoints a delivery could go to now (due work,
#   circuit closed, room under the in-flight limit, a rate-limit token left), in
#   round-robin order: least recently served first (``served_at``). Round robin
#   rather than oldest-delivery-first is the point: an endpoint with a large or
#   slow backlog gets its turn like the others instead of holding every slot.
#   Round robin over endpoints, rather than a weighted share, needs no state but
#   one timestamp per endpoint, and an endpoint's limits bound its share anyway.
#   In-flight deliveries are counted through ``pgq_dlv_flight_idx`` (in_progress
#   rows only: a few per endpoint at most).
# * ``locked``: the candidates' endpoint rows are locked in id order (waiting,
#   not skipping: a completion's breaker update holds a row for a moment, and
#   skipping it would make a one-endpoint claim come back empty). The count of
#   in-flight rows read by this statement is from its snapshot; a claim that
#   committed after that snapshot is invisible to it. Every claim therefore
#   stamps ``served_at`` on the endpoints it took from, and ``locked`` keeps an
#   endpoint only if the locked (newest) row still carries the ``served_at`` of
#   the snapshot: READ COMMITTED re-checks the condition against the newest row
#   version while ``candidates`` keeps the snapshot's copy, so an endpoint served
#   since the snapshot drops out of this claim and is taken by the next. The
#   limit thus holds across processes and hosts without a counter that could
#   drift.
# * ``rooms``: how many each endpoint may take: the least of what its in-flight
#   limit leaves, its rate-limit tokens (GCRA, see _RATE_ALLOWANCE) and an equal
#   share of the batch (so one claim spreads over the endpoints it serves).
# * ``due``: per endpoint, its oldest due deliveries, at most its room. FIFO
#   deliveries (``ordering_key`` set) are taken only at the head of their key:
#   no older delivery of the key still waiting or in flight, and none in flight.
# * ``served``: the endpoints taken from get their ``served_at`` stamp (the round
#   robin cursor and the fence above) and their rate-limit state moved on.
CLAIM_DELIVERIES = f"""/* pgqueue:claim_deliveries */
WITH RECURSIVE lapsed AS MATERIALIZED (
    SELECT d.id, d.attempts >= d.max_attempts AS exhausted,
           (e.is_active AND e.breaker_state = 'closed') AS sendable,
           d.attempts AS old_attempt, d.worker_id AS old_worker,
           d.last_attempted_at AS old_started
    FROM {DELIVERY_TABLE} AS d JOIN {ENDPOINT_TABLE} AS e ON e.id = d.endpoint_id
    WHERE d.status = 'in_progress' AND d.locked_until < now()
    ORDER BY d.locked_until
    LIMIT %(limit)s
    FOR UPDATE OF d SKIP LOCKED
), probe_endpoints AS MATERIALIZED (
    SELECT e.id FROM {ENDPOINT_TABLE} AS e
    WHERE e.is_active AND e.breaker_state IN ('open', 'half_open') AND e.open_until <= now()
      AND EXISTS (
          SELECT 1 FROM {DELIVERY_TABLE} AS d
          WHERE d.endpoint_id = e.id AND d.status IN ('pending', 'failed')
            AND d.next_attempt_at <= now())
    LIMIT GREATEST(0, %(limit)s - (SELECT count(*) FROM lapsed))
    FOR UPDATE OF e SKIP LOCKED
), probes AS MATERIALIZED (
    SELECT x.id, pe.id AS endpoint_id
    FROM probe_endpoints AS pe
    CROSS JOIN LATERAL (
        SELECT d.id FROM {DELIVERY_TABLE} AS d
        WHERE d.endpoint_id = pe.id AND d.status IN ('pending', 'failed')
          AND d.next_attempt_at <= now()
        ORDER BY d.next_attempt_at, d.id
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    ) AS x
), half_opened AS (
    UPDATE {ENDPOINT_TABLE} AS e SET
        breaker_state = 'half_open',
        open_until = now() + make_interval(secs => %(lease)s),
        updated_at = now()
    FROM probes AS p WHERE e.id = p.endpoint_id
    RETURNING e.id
), walk(endpoint_id) AS (
    (SELECT d.endpoint_id FROM {DELIVERY_TABLE} AS d
     WHERE d.status IN ('pending', 'failed')
     ORDER BY d.endpoint_id, d.next_attempt_at LIMIT 1)
    UNION ALL
    SELECT (SELECT d.endpoint_id FROM {DELIVERY_TABLE} AS d
            WHERE d.status IN ('pending', 'failed') AND d.endpoint_id > w.endpoint_id
            ORDER BY d.endpoint_id, d.next_attempt_at LIMIT 1)
    FROM walk AS w WHERE w.endpoint_id IS NOT NULL
), free AS MATERIALIZED (
    SELECT GREATEST(0, %(limit)s - (SELECT count(*) FROM lapsed)
                       - (SELECT count(*) FROM probes)) AS n
), candidates AS MATERIALIZED (
    SELECT e.id, e.served_at
    FROM walk AS w JOIN {ENDPOINT_TABLE} AS e ON e.id = w.endpoint_id
    WHERE e.is_active AND e.breaker_state = 'closed'
      AND COALESCE({_RATE_ALLOWANCE}, 1) > 0
      AND (COALESCE(e.max_in_flight, %(max_in_flight)s::int) IS NULL
           OR COALESCE(e.max_in_flight, %(max_in_flight)s::int) > ({_IN_FLIGHT}))
      AND EXISTS (
          SELECT 1 FROM {DELIVERY_TABLE} AS d
          WHERE d.endpoint_id = e.id AND d.status IN ('pending', 'failed')
            AND d.next_attempt_at <= now())
    ORDER BY e.served_at NULLS FIRST, e.id
    LIMIT (SELECT n FROM free)
), locked AS MATERIALIZED (
    SELECT e.id, LEAST(
               CASE WHEN COALESCE(e.max_in_flight, %(max_in_flight)s::int) IS NOT NULL
                    THEN COALESCE(e.max_in_flight, %(max_in_flight)s::int) - ({_IN_FLIGHT}) END,
               {_RATE_ALLOWANCE}) AS room
    FROM {ENDPOINT_TABLE} AS e JOIN candidates AS c ON c.id = e.id
    WHERE e.served_at IS NOT DISTINCT FROM c.served_at
      AND e.is_active AND e.breaker_state = 'closed'
    ORDER BY e.id
    FOR UPDATE OF e
), rooms AS MATERIALIZED (
    SELECT l.id, LEAST(l.room, ceil((SELECT n FROM free)::numeric
                                   / GREATEST(1, (SELECT count(*) FROM locked)))::int) AS room
    FROM locked AS l
), due AS MATERIALIZED (
    SELECT x.id, r.id AS endpoint_id
    FROM rooms AS r
    CROSS JOIN LATERAL (
        SELECT d.id FROM {DELIVERY_TABLE} AS d
        WHERE d.endpoint_id = r.id AND d.status IN ('pending', 'failed')
          AND d.next_attempt_at <= now()
          AND {_FIFO_HEAD}
        ORDER BY d.next_attempt_at, d.id
        LIMIT r.room
        FOR UPDATE OF d SKIP LOCKED
    ) AS x
    WHERE r.room > 0
    LIMIT (SELECT n FROM free)
), served AS (
    UPDATE {ENDPOINT_TABLE} AS e SET
        served_at = clock_timestamp(),
        rate_tat = CASE WHEN e.rate_limit IS NOT NULL
            THEN GREATEST(e.rate_tat, now())
                 + make_interval(secs => s.n * e.rate_period::float8 / e.rate_limit) END
    FROM (SELECT endpoint_id, count(*) AS n FROM due GROUP BY endpoint_id) AS s
    WHERE e.id = s.endpoint_id
), picked AS (
    SELECT array_agg(id) AS ids, array_agg(exhausted) AS exhausted,
           array_agg(sendable) AS sendable, array_agg(lapsed) AS lapsed,
           array_agg(old_attempt) AS old_attempt, array_agg(old_worker) AS old_worker,
           array_agg(old_started) AS old_started
    FROM (
        SELECT id, exhausted, sendable, true AS lapsed, old_attempt, old_worker, old_started
        FROM lapsed
        UNION ALL
        SELECT id, false, true, false, NULL::int, NULL::text, NULL::timestamptz FROM probes
        UNION ALL
        SELECT id, false, true, false, NULL::int, NULL::text, NULL::timestamptz FROM due
    ) AS all_sources
), claimed AS (
    UPDATE {DELIVERY_TABLE} AS d SET
        status = CASE WHEN p.exhausted THEN 'dead'
                      WHEN p.sendable THEN 'in_progress' ELSE 'failed' END,
        attempts = CASE WHEN p.sendable AND NOT p.exhausted THEN d.attempts + 1
                        ELSE d.attempts END,
        locked_by = CASE WHEN p.sendable AND NOT p.exhausted THEN gen_random_uuid()
                         ELSE d.locked_by END,
        locked_until = CASE WHEN p.sendable AND NOT p.exhausted
                            THEN now() + make_interval(secs => %(lease)s) END,
        worker_id = CASE WHEN p.sendable AND NOT p.exhausted THEN %(worker_id)s
                         ELSE d.worker_id END,
        started_at = COALESCE(d.started_at, now()),
        last_attempted_at = CASE WHEN p.sendable AND NOT p.exhausted THEN now()
                                 ELSE d.last_attempted_at END,
        next_attempt_at = CASE WHEN p.sendable OR p.exhausted THEN d.next_attempt_at
                               ELSE now() END,
        finished_at = CASE WHEN p.exhausted THEN now() END,
        last_error = CASE WHEN p.lapsed THEN 'LeaseExpired: worker ' || d.worker_id
                              || ' stopped renewing its lease (worker died?)'
                          ELSE d.last_error END,
        updated_at = now()
    FROM picked, unnest(picked.ids, picked.exhausted, picked.sendable, picked.lapsed,
                        picked.old_attempt, picked.old_worker, picked.old_started)
         AS p(id, exhausted, sendable, lapsed, old_attempt, old_worker, old_started)
    WHERE d.id = p.id
    RETURNING d.id, d.status, d.locked_by, d.attempts, d.max_attempts, d.endpoint_id,
              d.event_id, p.lapsed, p.old_attempt, p.old_worker, p.old_started
), lapse_log AS (
    INSERT INTO {ATTEMPT_TABLE} (
        delivery_id, attempt, started_at, duration_ms, response_headers, response_body,
        response_truncated, error, worker_id, created_at)
    SELECT c.id, c.old_attempt, COALESCE(c.old_started, now()), 0, '{{}}', '', false,
           'LeaseExpired: the worker stopped renewing its lease before recording an '
           || 'outcome (it crashed, was killed or lost the database); the receiver may '
           || 'have got this attempt', c.old_worker, now()
    FROM claimed AS c WHERE c.lapsed AND c.old_attempt >= 1
)
SELECT c.id, c.status, c.locked_by, c.attempts, c.max_attempts, c.endpoint_id, e.url,
       e.secret, e.previous_secrets, e.headers, ev.msg_id, ev.event_type, ev.body
FROM claimed AS c
JOIN {ENDPOINT_TABLE} AS e ON e.id = c.endpoint_id
JOIN {EVENT_TABLE} AS ev ON ev.id = c.event_id
ORDER BY row_number() OVER (PARTITION BY c.endpoint_id ORDER BY c.id), c.endpoint_id
"""

# Write a batch of delivery outcomes, their attempt rows and their endpoints'
# breakers in one statement (one transaction: an attempt is logged exactly when
# its outcome lands).
#
# * ``done`` is COMPLETE_JOBS's fenced UPDATE: a stale token writes nothing, and
#   then nothing is logged and no breaker moves either (``logged`` and
#   ``verdicts`` join ``done``). Verdicts are those of webhooks/breaker.py: 'none'
#   (released unsent) is not logged, 'local' (our side failed) does not move the
#   breaker. "Still held" is ``locked_until IS NOT NULL`` (equivalent to
#   ``status = 'in_progress'`` by the lease_iff_running CHECK): naming ``status``
#   would match the partial lease index's predicate and tempt the planner into
#   scanning that index's dead entries instead of one primary-key lookup per row.
# * ``breaker``: one UPDATE per endpoint with the batch's verdicts aggregated.
#   Counters are incremented in place (``consecutive_failures + n``) under the
#   row lock, never read and written back, so concurrent workers cannot lose a
#   failure. A success closes the circuit; reaching the threshold, or a failed
#   probe, opens it for a cool-down that doubles (capped) while failures go on. A
#   410 Gone, or failing without a success for DISABLE_AFTER, deactivates the
#   endpoint with a reason; its deliveries stay as they are.
# * ``done`` parks a row that goes back to waiting while its endpoint is disabled
#   (see PARKED_AT); an endpoint this very statement disables is parked by the
#   trigger once the statement is over.
# * ``deferred``: when this statement opens a circuit, the endpoint's waiting
#   deliveries are moved to the end of the cool-down. The claim would skip them
#   anyway; moving them keeps them from being scanned on every claim meanwhile.
COMPLETE_DELIVERIES = f"""/* pgqueue:complete_deliveries */
WITH v AS (
    SELECT * FROM unnest(
        %(ids)s::bigint[], %(tokens)s::uuid[], %(statuses)s::text[], %(delays)s::float8[],
        %(last_errors)s::text[], %(refunds)s::int[], %(attempts)s::int[],
        %(started)s::timestamptz[], %(durations)s::int[], %(codes)s::int[],
        %(headers)s::text[], %(bodies)s::text[], %(truncated)s::bool[],
        %(errors)s::text[], %(verdicts)s::text[]
    ) AS v(id, token, status, delay, last_error, refund, attempt, started_at, duration_ms,
           status_code, headers, body, truncated, error, verdict)
), done AS (
    UPDATE {DELIVERY_TABLE} AS d SET
        status = v.status,
        locked_until = NULL,
        finished_at = CASE WHEN v.status IN ('succeeded', 'dead') THEN now() END,
        next_attempt_at = CASE WHEN v.status NOT IN ('failed', 'pending')
                                   THEN d.next_attempt_at
                               WHEN ep.is_active THEN now() + make_interval(secs => v.delay)
                               ELSE {_PARKED} END,
        attempts = d.attempts - v.refund,
        last_error = COALESCE(v.last_error, d.last_error),
        updated_at = now()
    FROM v, {ENDPOINT_TABLE} AS ep
    WHERE d.id = v.id AND d.locked_by = v.token AND d.locked_until IS NOT NULL
      AND ep.id = d.endpoint_id
    RETURNING d.id, d.endpoint_id, d.status
), logged AS (
    INSERT INTO {ATTEMPT_TABLE} (
        delivery_id, attempt, started_at, duration_ms, status_code, response_headers,
        response_body, response_truncated, error, worker_id, created_at)
    SELECT v.id, v.attempt, v.started_at, v.duration_ms, v.status_code, v.headers::jsonb,
           v.body, v.truncated, v.error, %(worker_id)s, now()
    FROM v JOIN done ON done.id = v.id
    WHERE v.verdict <> 'none'
), verdicts AS (
    SELECT done.endpoint_id,
           bool_or(v.verdict = 'gone') AS gone,
           bool_or(v.verdict = 'success') AS succeeded,
           count(*) FILTER (WHERE v.verdict IN ('failure', 'gone')) AS failures
    FROM v JOIN done ON done.id = v.id
    WHERE v.verdict IN ('success', 'failure', 'gone')
    GROUP BY done.endpoint_id
), ordered AS MATERIALIZED (
    -- The endpoint rows are locked in id order, as the claim locks them (its
    -- ``locked``): a claim and a completion that both touch several endpoints can
    -- then never wait for each other in a cycle.
    SELECT e.id FROM {ENDPOINT_TABLE} AS e
    WHERE e.id IN (SELECT endpoint_id FROM verdicts)
    ORDER BY e.id
    FOR UPDATE
), decided AS (
    -- Whether to deactivate, read from the endpoint's snapshot: failing_since only
    -- moves on the first failure and on a success, so a stale read is harmless.
    SELECT s.*, old.breaker_state AS old_state, old.is_active AS was_active, s.gone OR (
               NOT s.succeeded AND COALESCE(
                   old.failing_since <= now() - make_interval(secs => %(disable_after)s),
                   false)) AS disable
    FROM verdicts AS s JOIN {ENDPOINT_TABLE} AS old ON old.id = s.endpoint_id
    JOIN ordered ON ordered.id = s.endpoint_id
), breaker AS (
    UPDATE {ENDPOINT_TABLE} AS e SET
        is_active = e.is_active AND NOT s.disable,
        disabled_at = CASE WHEN e.is_active AND s.disable THEN now() ELSE e.disabled_at END,
        disabled_reason = CASE
            WHEN NOT (e.is_active AND s.disable) THEN e.disabled_reason
            WHEN s.gone
                THEN 'The receiver answered 410 Gone: it asked not to be sent webhooks any more.'
            ELSE 'Every delivery failed since ' || to_char(
                e.failing_since AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"')
                || ' (' || (e.consecutive_failures + s.failures) || ' failures in a row).'
            END,
        consecutive_failures = CASE WHEN s.succeeded THEN 0
                                    ELSE e.consecutive_failures + s.failures END,
        failing_since = CASE WHEN s.succeeded THEN NULL
                             ELSE COALESCE(e.failing_since, now()) END,
        last_success_at = CASE WHEN s.succeeded THEN now() ELSE e.last_success_at END,
        breaker_state = CASE
            WHEN s.succeeded THEN 'closed'
            WHEN e.breaker_state = 'half_open'
                 OR e.consecutive_failures + s.failures >= %(threshold)s THEN 'open'
            ELSE e.breaker_state END,
        breaker_cooldown = CASE
            WHEN s.succeeded THEN 0
            WHEN e.breaker_state = 'half_open'
                THEN LEAST(%(max_cooldown)s, GREATEST(%(cooldown)s, e.breaker_cooldown * 2))
            WHEN e.breaker_state = 'closed'
                 AND e.consecutive_failures + s.failures >= %(threshold)s THEN %(cooldown)s
            ELSE e.breaker_cooldown END,
        open_until = CASE
            WHEN s.succeeded THEN NULL
            WHEN e.breaker_state = 'half_open' THEN now() + make_interval(secs =>
                LEAST(%(max_cooldown)s, GREATEST(%(cooldown)s, e.breaker_cooldown * 2)))
            WHEN e.breaker_state = 'closed'
                 AND e.consecutive_failures + s.failures >= %(threshold)s
                THEN now() + make_interval(secs => %(cooldown)s)
            ELSE e.open_until END,
        updated_at = now()
    FROM decided AS s
    WHERE e.id = s.endpoint_id
    RETURNING e.id, e.breaker_state, e.open_until, s.old_state <> 'open' AS opened_now,
              s.old_state, s.was_active AND s.disable AS disabled_now
), deferred AS (
    UPDATE {DELIVERY_TABLE} AS d SET next_attempt_at = b.open_until, updated_at = now()
    FROM breaker AS b
    WHERE b.breaker_state = 'open' AND b.opened_now AND d.endpoint_id = b.id
      AND d.status IN ('pending', 'failed') AND d.next_attempt_at < b.open_until
)
-- Each written id, with its endpoint's circuit before and after (for the metrics),
-- its new status and whether this statement disabled its endpoint (for the
-- operational signals, webhooks/operational.py).
SELECT done.id, done.endpoint_id, b.old_state, b.breaker_state, done.status,
       COALESCE(b.disabled_now, false)
FROM done LEFT JOIN breaker AS b ON b.id = done.endpoint_id
"""


def _on_table(statement: str, marker: str, table: str) -> str:
    """A job statement that is table-agnostic, renamed and pointed at ``table``."""
    _marker, _, rest = statement.partition(" */")
    return f"/* pgqueue:{marker} */" + rest.replace(JOB_TABLE, table)


# Settle an ambiguous commit and extend leases: READ_OUTCOMES and EXTEND_LEASES
# exactly, on the delivery table.
READ_DELIVERY_OUTCOMES = _on_table(READ_OUTCOMES, "read_delivery_outcomes", DELIVERY_TABLE)
EXTEND_DELIVERY_LEASES = _on_table(EXTEND_LEASES, "extend_delivery_leases", DELIVERY_TABLE)

# Anything a claim could take now, or held by a worker (``--burst``'s exit test).
# Deliveries of an open circuit count only once a probe is due; FIFO deliveries
# behind a head that waits for its retry do not count. A delivery held back only
# by its endpoint's rate limit counts: a burst run waits for it.
ANY_DUE_DELIVERIES = f"""/* pgqueue:any_due_deliveries */
SELECT EXISTS (
    SELECT 1 FROM {DELIVERY_TABLE} AS d JOIN {ENDPOINT_TABLE} AS e ON e.id = d.endpoint_id
    WHERE d.status IN ('pending', 'failed') AND d.next_attempt_at <= now()
      AND e.is_active AND (e.breaker_state = 'closed' OR e.open_until <= now())
      AND {_FIFO_HEAD}
) OR EXISTS (
    SELECT 1 FROM {DELIVERY_TABLE} WHERE status = 'in_progress'
)
"""

# Anything left to send (``--until-empty``): waiting deliveries of active
# endpoints, due or not, and held ones. A disabled endpoint's deliveries are
# parked until an operator acts, so they do not count.
ANY_LEFT_DELIVERIES = f"""/* pgqueue:any_left_deliveries */
SELECT EXISTS (
    SELECT 1 FROM {DELIVERY_TABLE} AS d JOIN {ENDPOINT_TABLE} AS e ON e.id = d.endpoint_id
    WHERE d.status IN ('pending', 'failed') AND e.is_active
) OR EXISTS (
    SELECT 1 FROM {DELIVERY_TABLE} WHERE status = 'in_progress'
)
"""

# DELIVERY retries due now (django_pgqueue.testing), as RETRIES_DUE_NOW.
DELIVERY_RETRIES_DUE_NOW = f"""/* pgqueue:delivery_retries_due_now */
UPDATE {DELIVERY_TABLE} AS d SET next_attempt_at = now()
WHERE status = 'failed' AND next_attempt_at > now() AND next_attempt_at < {_PARKED}
"""

# A re-enabled endpoint's kept deliveries go out now rather than at the retry
# time they were last given (which may be hours away after days of failure).
DELIVERIES_DUE_NOW = f"""/* pgqueue:deliveries_due_now */
UPDATE {DELIVERY_TABLE} SET next_attempt_at = now(), updated_at = now()
WHERE endpoint_id = ANY(%s) AND status IN ('pending', 'failed') AND next_attempt_at > now()
"""

# Deliveries refused by the SSRF settings wait at the breaker's pace; saving their
# endpoint (a corrected URL, or after the settings changed) makes them due now. The
# refusal is read from ``last_error`` ("attempt N: refused: ..."), which is what the
# admin shows; a parked endpoint (inactive) keeps its deliveries parked.
REFUSED_DELIVERIES_DUE_NOW = f"""/* pgqueue:refused_deliveries_due_now */
UPDATE {DELIVERY_TABLE} AS d SET next_attempt_at = now(), updated_at = now()
FROM {ENDPOINT_TABLE} AS e
WHERE d.endpoint_id = %s AND e.id = d.endpoint_id AND e.is_active
  AND d.status = 'failed' AND d.next_attempt_at > now()
  AND d.last_error LIKE 'attempt %%: refused: %%'
"""

# ---------------------------------------------------------------------------------
# Periodic tasks (periodic/scheduler.py)
#
# Every worker process runs the scheduler; none is a leader. A tick is enqueued by
# the transaction that inserts its (schedule, instant) row: the unique constraint
# ``pgq_tick_once`` makes a concurrent insert of the same tick wait for the first
# transaction, then insert nothing (or, if the first rolled back because its
# worker died, insert it after all). The tick row and its job commit together.
# "Now" is a parameter: the database's ``now()`` read at the start of a pass (or a
# clock a test injects), so every statement of a pass agrees on the time.
# ---------------------------------------------------------------------------------

SCHEDULE_TABLE = "pgqueue_schedule"
TICK_TABLE = "pgqueue_schedule_tick"

DATABASE_NOW = "/* pgqueue:now */ SELECT now()"

# Mirror a declared schedule in its row (at scheduler start). A new row's cursor
# is its creation: ticks before a schedule existed are never "missed". A changed
# cron or time zone gets its next tick recomputed; pause and cursor are kept.
UPSERT_SCHEDULE = f"""/* pgqueue:upsert_schedule */
INSERT INTO {SCHEDULE_TABLE} AS s (
    name, task_path, cron, timezone, args, kwargs, queue_name, catch_up, origin,
    paused, last_tick_at, last_job_id, next_tick_at, declared_at, created_at, updated_at
) VALUES (
    %(name)s, %(task_path)s, %(cron)s, %(timezone)s, %(args)s::jsonb, %(kwargs)s::jsonb,
    %(queue_name)s, %(catch_up)s, %(origin)s, false, NULL, NULL, %(next)s, %(now)s,
    %(now)s, %(now)s
)
ON CONFLICT (name) DO UPDATE SET
    task_path = EXCLUDED.task_path, cron = EXCLUDED.cron, timezone = EXCLUDED.timezone,
    args = EXCLUDED.args, kwargs = EXCLUDED.kwargs, queue_name = EXCLUDED.queue_name,
    catch_up = EXCLUDED.catch_up, origin = EXCLUDED.origin,
    next_tick_at = CASE WHEN (s.cron, s.timezone) = (EXCLUDED.cron, EXCLUDED.timezone)
                             AND s.next_tick_at IS NOT NULL
                        THEN s.next_tick_at ELSE EXCLUDED.next_tick_at END,
    declared_at = EXCLUDED.declared_at, updated_at = EXCLUDED.updated_at
"""

# A schedule's state at the start of its pass: no lock (the tick insert decides).
SCHEDULE_STATE = f"""/* pgqueue:schedule_state */
SELECT paused, COALESCE(last_tick_at, created_at) FROM {SCHEDULE_TABLE} WHERE name = %s
"""

# Claim one tick: a row back means this transaction enqueues it.
INSERT_TICK = f"""/* pgqueue:insert_tick */
INSERT INTO {TICK_TABLE} (schedule_name, tick_at, job_id, created_at)
VALUES (%s, %s, NULL, now())
ON CONFLICT (schedule_name, tick_at) DO NOTHING
RETURNING id
"""

SET_TICK_JOB = f"""/* pgqueue:set_tick_job */
UPDATE {TICK_TABLE} AS t SET job_id = %s WHERE t.id = %s
"""

# Move a schedule's cursor forward (never back: a pass that read an older cursor
# changes nothing) and record its next tick and last job for the admin.
ADVANCE_SCHEDULE = f"""/* pgqueue:advance_schedule */
UPDATE {SCHEDULE_TABLE} SET
    last_tick_at = %(tick)s,
    last_job_id = COALESCE(%(job_id)s, last_job_id),
    next_tick_at = %(next)s,
    updated_at = %(now)s
WHERE name = %(name)s AND (last_tick_at IS NULL OR last_tick_at < %(tick)s)
"""


# ---------------------------------------------------------------------------------
# Maintenance
#
# Retention (``manage.py pgqueue_prune``, maintenance.py). Terminal rows are
# deleted in short autocommit batches: the candidates of a batch are found by
# walking the primary key forward from where the previous batch stopped (keyset
# pagination, so no row is examined twice and no batch rescans the dead space
# left by the previous ones), then deleted by id with the retention test repeated,
# so a row replayed in between is left alone. ``retained`` is a pair of parallel
# arrays: a state and the age in seconds after which rows in it may go.
# ---------------------------------------------------------------------------------

_EXPIRED = """EXISTS (
    SELECT 1 FROM unnest(%(states)s::text[], %(ages)s::float8[]) AS r(status, age)
    WHERE t.status = r.status
      AND COALESCE(t.finished_at, t.updated_at) < now() - make_interval(secs => r.age)
)"""

# The next ids to delete after ``after`` (at most ``limit``), and the id where the
# walk stopped (the largest id examined), so the next batch starts there.
PRUNE_CANDIDATES = """/* pgqueue:prune_candidates */
WITH walk AS (
    SELECT t.id, {expired} AS expired FROM {table} AS t
    WHERE t.id > %(after)s
    ORDER BY t.id
    LIMIT %(scan)s
)
SELECT coalesce(array_agg(id) FILTER (WHERE expired), '{{}}'), max(id) FROM walk
"""

# Delete one batch of jobs (the retention test again: see above).
PRUNE_JOBS = f"""/* pgqueue:prune_jobs */
DELETE FROM {JOB_TABLE} AS t
WHERE t.id = ANY(%(ids)s::bigint[]) AND {_EXPIRED}
RETURNING t.status
"""

# Delete one batch of deliveries with their attempt log. The attempt rows of the
# deleted deliveries go in the same statement (the foreign key is checked at commit).
PRUNE_DELIVERIES = f"""/* pgqueue:prune_deliveries */
WITH gone AS (
    DELETE FROM {DELIVERY_TABLE} AS t
    WHERE t.id = ANY(%(ids)s::bigint[]) AND {_EXPIRED}
    RETURNING t.id, t.status
), attempts AS (
    DELETE FROM {ATTEMPT_TABLE} AS a USING gone WHERE a.delivery_id = gone.id
)
SELECT status FROM gone
"""

# Events whose every delivery is gone, older than ``age`` seconds, a batch at a
# time. An event is kept while any delivery of it remains (the unique
# (event, endpoint) constraint's index answers that), and deleting it frees its
# idempotency key.
PRUNE_EVENTS = f"""/* pgqueue:prune_events */
DELETE FROM {EVENT_TABLE} AS e
WHERE e.id IN (
    SELECT ev.id FROM {EVENT_TABLE} AS ev
    WHERE ev.created_at < now() - make_interval(secs => %(age)s)
      AND NOT EXISTS (SELECT 1 FROM {DELIVERY_TABLE} AS d WHERE d.event_id = ev.id)
    ORDER BY ev.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
"""

# What a prune would delete, per state (``--dry-run``).
PRUNE_COUNT = """/* pgqueue:prune_count */
SELECT t.status, count(*) FROM {table} AS t WHERE {expired} GROUP BY t.status ORDER BY t.status
"""

# Events a prune would delete (``--dry-run``): those already without deliveries.
PRUNE_COUNT_EVENTS = f"""/* pgqueue:prune_count_events */
SELECT count(*) FROM {EVENT_TABLE} AS ev
WHERE ev.created_at < now() - make_interval(secs => %(age)s)
  AND NOT EXISTS (SELECT 1 FROM {DELIVERY_TABLE} AS d WHERE d.event_id = ev.id)
"""


def prune_candidates(table: str) -> str:
    """PRUNE_CANDIDATES for ``table`` (JOB_TABLE or DELIVERY_TABLE)."""
    if table not in (JOB_TABLE, DELIVERY_TABLE):
        raise ValueError(f"not a queue table: {table!r}")
    return PRUNE_CANDIDATES.format(table=table, expired=_EXPIRED)


def prune_count(table: str) -> str:
    """PRUNE_COUNT for ``table`` (JOB_TABLE or DELIVERY_TABLE)."""
    if table not in (JOB_TABLE, DELIVERY_TABLE):
        raise ValueError(f"not a queue table: {table!r}")
    return PRUNE_COUNT.format(table=table, expired=_EXPIRED)


# Which of the given tables the queue database lacks (system check W002).
# ``to_regclass`` resolves a name the way the queue's own statements will (through
# the search_path) and returns NULL instead of raising for a missing table.
MISSING_TABLES = """/* pgqueue:missing_tables */
SELECT t FROM unnest(%s::text[]) AS t WHERE to_regclass(quote_ident(t)) IS NULL ORDER BY t
"""

# ---------------------------------------------------------------------------------
# Worker heartbeats
#
# One row per live worker process, written by its completer thread on the lease
# cadence over the connection it already holds (no extra connection, one statement
# per beat). The upsert also prunes rows of workers that stopped beating long ago,
# so the table stays as small as the fleet without a maintenance job: a crashed
# worker's row is shown as gone until then.
WORKER_TABLE = "pgqueue_worker"

HEARTBEAT = f"""/* pgqueue:heartbeat */
WITH pruned AS (
    DELETE FROM {WORKER_TABLE}
    WHERE last_seen_at < now() - make_interval(secs => %(keep)s) AND worker_id <> %(worker_id)s
)
INSERT INTO {WORKER_TABLE} AS w (
    worker_id, host, pid, version, queues, concurrency, started_at, last_seen_at)
VALUES (%(worker_id)s, %(host)s, %(pid)s, %(version)s, %(queues)s::jsonb, %(concurrency)s,
        now(), now())
ON CONFLICT (worker_id) DO UPDATE SET last_seen_at = now()
"""

# A worker that stops cleanly removes its row: it is not "gone", it is done.
HEARTBEAT_STOP = f"""/* pgqueue:heartbeat_stop */
DELETE FROM {WORKER_TABLE} WHERE worker_id = %(worker_id)s
"""

# Every known worker, newest first, with the database's now() to judge staleness.
WORKERS = f"""/* pgqueue:workers */
SELECT worker_id, host, pid, version, queues, concurrency, started_at, last_seen_at, now()
FROM {WORKER_TABLE}
ORDER BY started_at DESC, worker_id
"""


# ---------------------------------------------------------------------------------
# Tracing (``PGQUEUE["TRACING"]``, tracing.py)
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
WHERE id = ANY(%s) AND trace_context IS NOT NULL
"""
