"""Statements of periodic tasks (periodic/scheduler.py)."""

from __future__ import annotations

from .fragments import SCHEDULE_TABLE, TICK_TABLE

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
