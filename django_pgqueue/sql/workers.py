"""Worker heartbeats (worker/heartbeat.py) and the list of live workers."""

from __future__ import annotations

from .fragments import CLAIMABLE_SQL, JOB_TABLE, WORKER_TABLE

# ---------------------------------------------------------------------------------
# Worker heartbeats
#
# One row per live worker process, written by its completer thread on the lease
# cadence over the connection it already holds (no extra connection, one statement
# per beat). The upsert also prunes rows of workers that stopped beating long ago,
# so the table stays as small as the fleet without a maintenance job: a crashed
# worker's row is shown as gone until then.

HEARTBEAT = f"""/* pgqueue:heartbeat */
WITH pruned AS (
    DELETE FROM {WORKER_TABLE}
    WHERE last_seen_at < now() - pg_catalog.make_interval(secs => %(keep)s)
      AND worker_id <> %(worker_id)s
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


# The names of ``runworkers --queues`` that no job has used, as far as a cheap look
# can tell: no live job (read through the two partial indexes, so a missing name
# costs the backlog, not a scan of the history) and not among the common values
# ANALYZE keeps for ``queue_name``. Only a start-up warning rests on it.
QUEUES_NEVER_SEEN = f"""/* pgqueue:queues_never_seen */
SELECT q FROM unnest(%(queues)s::text[]) AS q
WHERE NOT EXISTS (
    SELECT 1 FROM {JOB_TABLE} AS j
    WHERE j.status IN {CLAIMABLE_SQL} AND j.queue_name = q)
  AND NOT EXISTS (
    SELECT 1 FROM {JOB_TABLE} AS j WHERE j.status = 'in_progress' AND j.queue_name = q)
  AND NOT EXISTS (
    SELECT 1 FROM pg_catalog.pg_stats AS s,
         unnest(s.most_common_vals::text::text[]) AS v(val)
    WHERE s.tablename = '{JOB_TABLE}' AND s.attname = 'queue_name'
      AND s.schemaname = (
          SELECT n.nspname FROM pg_catalog.pg_class AS c
          JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
          WHERE c.oid = pg_catalog.to_regclass('{JOB_TABLE}'))
      AND v.val = q)
ORDER BY q
"""
