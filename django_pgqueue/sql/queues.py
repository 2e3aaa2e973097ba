"""Statements of the queues' rows (``django_pgqueue.queues``, flow control).

Only configuration and the pause are written here (Django cursor, ``%(name)s``);
the claim's state of a queue (``served_at``, ``rate_tat``, the per-key rate rows)
is written by the claim alone (sql/jobs.py), so a configuration change never
writes back a stale one. A configuration comes from one of two places:
``PGQUEUE["QUEUES"]``, applied by every worker as it starts
(APPLY_QUEUE_SETTINGS), and a run-time change (CONFIGURE_QUEUE: ``configure``,
the admin, the API, the command), which stamps ``overridden_at`` and from then on
wins over the settings until RESET_QUEUE hands the queue back to them.

The statements that can make or drop a row also say which rows they made
(``created``, read from the statement's snapshot: the rows as they were before
it) and dropped, so ``queues`` marks or unmarks those queues' waiting jobs in the
same transaction (sql/jobs.py, MARK_QUEUE_JOBS: the flow claim reads marked
jobs only).
"""

from __future__ import annotations

from .fragments import CLAIMABLE_SQL, JOB_TABLE, QUEUE_KEY_RATE_TABLE, QUEUE_TABLE

#: The configuration columns of a queue row (``queue_limits.LIMIT_FIELDS``), each
#: set from the parameter of its name.
LIMIT_COLUMNS = (
    "concurrency",
    "key_concurrency",
    "rate_limit",
    "rate_period",
    "key_rate_limit",
    "key_rate_period",
)
_COLUMNS_SQL = ", ".join(LIMIT_COLUMNS)
_VALUES_SQL = ", ".join(f"%({column})s" for column in LIMIT_COLUMNS)
_FROM_EXCLUDED_SQL = ", ".join(f"{column} = EXCLUDED.{column}" for column in LIMIT_COLUMNS)
_CLEARED_SQL = ", ".join(
    column + (" = 1" if column.endswith("period") else " = NULL") for column in LIMIT_COLUMNS
)
_ROW_COLUMNS_SQL = ", ".join("q." + column for column in LIMIT_COLUMNS)
_EXCLUDED_COLUMNS_SQL = ", ".join("EXCLUDED." + column for column in LIMIT_COLUMNS)

# Set a queue's limits at run time, making its row on first use. ``ON CONFLICT``
# makes two concurrent first configurations one row (the second waits, then
# updates). Every limit is set, a NULL clearing it: a configuration is the whole
# of it, never merged with what an earlier call left. ``overridden_at`` says the
# limits are an operator's, so a worker's start no longer applies the settings'.
# A cleared key rate limit drops the queue's per-key rate state with it, after the
# queue row is written (the DELETE reads ``configured``): the queue row's lock
# first, then its key rows', the order the claim takes them in, so the two never
# deadlock.
CONFIGURE_QUEUE = f"""/* pgqueue:configure_queue */
WITH configured AS (
    INSERT INTO {QUEUE_TABLE} AS q (name, {_COLUMNS_SQL}, overridden_at)
    VALUES (%(name)s, {_VALUES_SQL}, now())
    ON CONFLICT (name) DO UPDATE SET
        {_FROM_EXCLUDED_SQL}, overridden_at = now(), updated_at = now()
    RETURNING q.name
), cleared AS (
    DELETE FROM {QUEUE_KEY_RATE_TABLE} AS t USING configured AS c
    WHERE t.queue_name = c.name AND %(key_rate_limit)s::int IS NULL
)
SELECT c.name, NOT EXISTS (SELECT 1 FROM {QUEUE_TABLE} AS q WHERE q.name = c.name) AS created
FROM configured AS c
"""

# Apply ``PGQUEUE["QUEUES"]`` (one array per column, zipped by ROWS FROM: a row per entry), as every
# worker does when it starts: a queue the settings name gets their limits unless
# an operator set its limits at run time (``overridden_at``), and a row is only
# written when its limits differ (a fleet's restart rewrites nothing). A queue
# the settings no longer name, whose limits came from them, loses them: its row
# goes when it is not paused (no row is no limit) and a paused one keeps only
# its pause. Rows an operator configured are left as they are.
APPLY_QUEUE_SETTINGS = f"""/* pgqueue:apply_queue_settings */
WITH wanted AS (
    SELECT * FROM ROWS FROM (
        pg_catalog.unnest(%(names)s::text[]), pg_catalog.unnest(%(concurrency)s::int[]),
        pg_catalog.unnest(%(key_concurrency)s::int[]), pg_catalog.unnest(%(rate_limit)s::int[]),
        pg_catalog.unnest(%(rate_period)s::int[]), pg_catalog.unnest(%(key_rate_limit)s::int[]),
        pg_catalog.unnest(%(key_rate_period)s::int[])) AS w(name, {_COLUMNS_SQL})
), applied AS (
    INSERT INTO {QUEUE_TABLE} AS q (name, {_COLUMNS_SQL})
    SELECT name, {_COLUMNS_SQL} FROM wanted
    ON CONFLICT (name) DO UPDATE SET {_FROM_EXCLUDED_SQL}, updated_at = now()
    WHERE q.overridden_at IS NULL
      AND ({_ROW_COLUMNS_SQL}) IS DISTINCT FROM ({_EXCLUDED_COLUMNS_SQL})
    RETURNING q.name
), unnamed AS (
    SELECT q.name, q.paused_at FROM {QUEUE_TABLE} AS q
    WHERE q.overridden_at IS NULL AND q.name <> ALL (%(names)s::text[])
), cleared AS (
    UPDATE {QUEUE_TABLE} AS q SET {_CLEARED_SQL}, updated_at = now()
    FROM unnamed AS u
    WHERE q.name = u.name AND u.paused_at IS NOT NULL
    RETURNING q.name
), dropped AS (
    DELETE FROM {QUEUE_TABLE} AS q USING unnamed AS u
    WHERE q.name = u.name AND u.paused_at IS NULL
    RETURNING q.name
), dropped_rates AS (
    -- After the queue rows (it reads them): the claim's lock order, no deadlock.
    DELETE FROM {QUEUE_KEY_RATE_TABLE} AS t
    USING (SELECT name FROM cleared UNION ALL SELECT name FROM dropped) AS g
    WHERE t.queue_name = g.name
)
SELECT (SELECT pg_catalog.count(*) FROM applied), (SELECT pg_catalog.count(*) FROM dropped),
       ARRAY(SELECT a.name FROM applied AS a
             WHERE NOT EXISTS (SELECT 1 FROM {QUEUE_TABLE} AS q WHERE q.name = a.name)),
       ARRAY(SELECT name FROM dropped)
"""

# Hand a queue back to the settings: its limits become the entry's (the
# parameters; all NULL when the settings do not name it) and ``overridden_at``
# is cleared, so the next worker start applies the settings again.
RESET_QUEUE = f"""/* pgqueue:reset_queue */
UPDATE {QUEUE_TABLE} SET
    ({_COLUMNS_SQL}) = ({_VALUES_SQL}), overridden_at = NULL, updated_at = now()
WHERE name = %(name)s
RETURNING name
"""

# Pause a queue (making its row if needed); a paused queue keeps its first pause time.
PAUSE_QUEUE = f"""/* pgqueue:pause_queue */
WITH paused AS (
    INSERT INTO {QUEUE_TABLE} AS q (name, paused_at) VALUES (%(name)s, now())
    ON CONFLICT (name) DO UPDATE SET paused_at = COALESCE(q.paused_at, now()), updated_at = now()
    RETURNING q.name
)
SELECT p.name, NOT EXISTS (SELECT 1 FROM {QUEUE_TABLE} AS q WHERE q.name = p.name) AS created
FROM paused AS p
"""

# Resume a queue. A queue without a row was never paused: nothing to do.
RESUME_QUEUE = f"""/* pgqueue:resume_queue */
UPDATE {QUEUE_TABLE} SET paused_at = NULL, updated_at = now()
WHERE name = %(name)s AND paused_at IS NOT NULL
RETURNING name
"""

#: What ``queues.list_queues`` reads of a queue, the columns of ``queues.QueueState``.
QUEUE_STATE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("name", "q.name"),
    ("concurrency", "q.concurrency"),
    ("key_concurrency", "q.key_concurrency"),
    ("rate_limit", "q.rate_limit"),
    ("rate_period", "q.rate_period"),
    ("key_rate_limit", "q.key_rate_limit"),
    ("key_rate_period", "q.key_rate_period"),
    ("overridden_at", "q.overridden_at"),
    ("paused_at", "q.paused_at"),
    # Counted from the rows, as the claim counts them.
    (
        "running",
        f"""(SELECT pg_catalog.count(*) FROM {JOB_TABLE} AS r
         WHERE r.queue_name = q.name AND r.status = 'in_progress')""",
    ),
)
_QUEUE_STATE = ", ".join(expression for _, expression in QUEUE_STATE_COLUMNS)

# The configured queues (the admin, ``pgqueue_queue list``, ``pgqueue_status``).
LIST_QUEUES = f"""/* pgqueue:list_queues */
SELECT {_QUEUE_STATE} FROM {QUEUE_TABLE} AS q
WHERE %(name)s::text IS NULL OR q.name = %(name)s
ORDER BY q.name
"""

# Whether a queue has a live job, read in the flow due index's order and the lease
# index's (a descent each): what makes a queue without a row "known" to the command.
QUEUE_HAS_LIVE_JOBS = f"""/* pgqueue:queue_has_live_jobs */
SELECT (SELECT true FROM {JOB_TABLE} AS n
        WHERE n.queue_name = %(name)s AND n.status IN {CLAIMABLE_SQL}
        ORDER BY n.queue_name, COALESCE(n.concurrency_key, '') LIMIT 1) IS NOT NULL
    OR (SELECT true FROM {JOB_TABLE} AS r
        WHERE r.queue_name = %(name)s AND r.status = 'in_progress'
        ORDER BY r.locked_until LIMIT 1) IS NOT NULL
"""
