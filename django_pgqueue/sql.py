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

# Reserve ids for a bulk enqueue. ``INSERT ... RETURNING`` does not promise to
# return rows in input order, so ids are drawn first and written explicitly: the
# caller then knows which result belongs to which argument list, and the same
# rows can go through COPY for large batches.
RESERVE_JOB_IDS = f"""/* pgqueue:reserve_ids */
SELECT nextval(pg_get_serial_sequence('{JOB_TABLE}', 'id')), now()
FROM generate_series(1, %s)
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

# The same rows through COPY, for large batches (several times faster than an
# INSERT). ``next_attempt_at`` and timestamps are filled in by the caller's values.
COPY_JOBS = f"""COPY {JOB_TABLE} (
    id, status, priority, attempts, max_attempts, next_attempt_at, worker_id,
    last_error, errors, created_at, updated_at, task_path, queue_name, backend,
    args, kwargs, worker_ids
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
#   of being run again (status 'dead' in RETURNING; the worker skips it).
# * ``locked_by`` gets a fresh random token per claim: the fencing token every
#   later write of this attempt must present.
# * The due source reads the ``(priority DESC, next_attempt_at, id)`` partial
#   index in order; terminal rows are not in it, so history does not slow it.
CLAIM_JOBS = f"""/* pgqueue:claim */
WITH lapsed AS MATERIALIZED (
    SELECT id, attempts >= max_attempts AS exhausted FROM {JOB_TABLE}
    WHERE status = 'in_progress' AND locked_until < now()
      AND (%(all_queues)s OR queue_name = ANY(%(queues)s))
    ORDER BY locked_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), due AS MATERIALIZED (
    SELECT id FROM {JOB_TABLE}
    WHERE status IN ('pending', 'failed') AND next_attempt_at <= now()
      AND (%(all_queues)s OR queue_name = ANY(%(queues)s))
    ORDER BY priority DESC, next_attempt_at, id
    LIMIT %(limit)s - (SELECT count(*) FROM lapsed)
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT id, exhausted, true AS lapsed FROM lapsed
    UNION ALL
    SELECT id, false, false FROM due
)
UPDATE {JOB_TABLE} AS j SET
    status = CASE WHEN p.exhausted THEN 'dead' ELSE 'in_progress' END,
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
FROM picked AS p
WHERE j.id = p.id
RETURNING {_CLAIM_RETURNING}
"""

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
COMPLETE_JOBS = f"""/* pgqueue:complete */
UPDATE {JOB_TABLE} AS j SET
    status = v.status,
    result = CASE WHEN v.status = 'succeeded' THEN v.result::jsonb ELSE j.result END,
    locked_until = NULL,
    finished_at = CASE WHEN v.status IN ('succeeded', 'dead') THEN now() ELSE NULL END,
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
WHERE j.id = v.id AND j.locked_by = v.token AND j.status = 'in_progress'
RETURNING j.id
"""

# After an ambiguous commit (the connection died while COMMIT's reply was in
# flight) the worker asks what the rows hold: a row whose ``locked_by`` is still
# its token and whose status is no longer in_progress was written by it.
READ_OUTCOMES = f"""/* pgqueue:read_outcomes */
SELECT id, status, locked_by FROM {JOB_TABLE} WHERE id = ANY(%(ids)s::bigint[])
"""

# Extend the leases of every row this process still holds, guarded by token like
# a completion. Rows missing from RETURNING were lost (re-claimed after a lapse).
EXTEND_LEASES = f"""/* pgqueue:extend_leases */
UPDATE {JOB_TABLE} AS j SET
    locked_until = now() + make_interval(secs => %(lease)s)
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS v(id, token)
WHERE j.id = v.id AND j.locked_by = v.token AND j.status = 'in_progress'
RETURNING j.id
"""

# Is anything due now or held by anyone? Used by ``--burst`` to decide to exit.
ANY_DUE = f"""/* pgqueue:any_due */
SELECT EXISTS (
    SELECT 1 FROM {JOB_TABLE}
    WHERE status IN ('pending', 'failed') AND next_attempt_at <= now()
      AND (%(all_queues)s OR queue_name = ANY(%(queues)s))
) OR EXISTS (
    SELECT 1 FROM {JOB_TABLE}
    WHERE status = 'in_progress'
      AND (%(all_queues)s OR queue_name = ANY(%(queues)s))
)
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
# are) and how many held rows have a lapsed lease (stuck: their worker died).
# ``now()`` comes back with the rows so ages are measured on the database clock.
JOB_OVERVIEW = f"""/* pgqueue:overview */
SELECT queue_name, status, count(*),
       min(next_attempt_at) FILTER (
           WHERE status IN ('pending', 'failed') AND next_attempt_at <= now()),
       count(*) FILTER (WHERE status = 'in_progress' AND locked_until < now()),
       now()
FROM {JOB_TABLE}
GROUP BY queue_name, status
ORDER BY queue_name, status
"""
