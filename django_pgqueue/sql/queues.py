"""Statements of the queues' rows (``django_pgqueue.queues``, flow control).

Only configuration and the pause are written here (Django cursor, ``%(name)s``);
the claim's state of a queue (``served_at``, ``rate_tat``) is written by the claim
alone (sql/jobs.py), so a configuration change never writes back a stale one.
"""

from __future__ import annotations

from .fragments import CLAIMABLE_SQL, JOB_TABLE, QUEUE_TABLE

# Set a queue's limits, making its row on first use. ``ON CONFLICT`` makes two
# concurrent first configurations one row (the second waits, then updates).
# Every limit is set, a NULL clearing it: a configuration is the whole of it,
# never merged with what an earlier call left.
CONFIGURE_QUEUE = f"""/* pgqueue:configure_queue */
INSERT INTO {QUEUE_TABLE} AS q (name, concurrency, key_concurrency, rate_limit, rate_period)
VALUES (%(name)s, %(concurrency)s, %(key_concurrency)s, %(rate_limit)s, %(rate_period)s)
ON CONFLICT (name) DO UPDATE SET
    concurrency = EXCLUDED.concurrency, key_concurrency = EXCLUDED.key_concurrency,
    rate_limit = EXCLUDED.rate_limit, rate_period = EXCLUDED.rate_period, updated_at = now()
RETURNING name
"""

# Pause a queue (making its row if needed); a paused queue keeps its first pause time.
PAUSE_QUEUE = f"""/* pgqueue:pause_queue */
INSERT INTO {QUEUE_TABLE} AS q (name, paused_at) VALUES (%(name)s, now())
ON CONFLICT (name) DO UPDATE SET paused_at = COALESCE(q.paused_at, now()), updated_at = now()
RETURNING name
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
