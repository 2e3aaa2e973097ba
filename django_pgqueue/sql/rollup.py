"""Statements of the console's rollup (``rollup/store.py``): one row per (kind,
name, minute), written with the completions it counts, read by the admin's charts."""

from __future__ import annotations

from .fragments import APPLICATION_TABLE, CLAIMABLE_SQL, ENDPOINT_TABLE, JOB_TABLE

ROLLUP_TABLE = "pgqueue_rollup"


# Add one batch of completions to its minutes: the upsert, with a ``WHERE`` of
# the caller's (``rollup_add``), so that the job completion can carry it as a CTE
# of its own statement (sql/jobs.py, COMPLETE_COUNTED_JOBS) and ROLLUP_RECORD can
# run it alone. The completer aggregates the batch in Python first (one row per
# kind and name: the statement never touches a row twice, which ON CONFLICT DO
# UPDATE refuses), and the counts are written in the transaction of the batch's
# completion: counts and completions commit together or not at all, so a retried
# or settled batch is never counted twice or lost. Rows come sorted by (kind,
# name): two completers adding to the same minutes lock them in the same order
# and cannot deadlock. Histograms (``rollup/histogram.py``) are added bucket by
# bucket; ``WITH ORDINALITY`` keeps the buckets in order. The minute is the
# database clock's, like every time the queue keeps.
def rollup_add(where_sql: str = "") -> str:
    """The rollup's upsert of the parameters ``kinds`` ... ``runs``, rows kept by
    ``where_sql`` (a ``WHERE`` clause, or nothing)."""
    return f"""INSERT INTO {ROLLUP_TABLE} AS r
    (kind, name, minute, ok, failed, retried, wait_hist, run_hist)
SELECT v.kind, v.name, pg_catalog.date_trunc('minute', now()), v.ok, v.failed, v.retried,
       v.wait_hist::bigint[], v.run_hist::bigint[]
FROM unnest(
    %(kinds)s::text[], %(names)s::text[], %(oks)s::bigint[], %(faileds)s::bigint[],
    %(retrieds)s::bigint[], %(waits)s::text[], %(runs)s::text[]
) AS v(kind, name, ok, failed, retried, wait_hist, run_hist)
{where_sql}
ON CONFLICT (kind, name, minute) DO UPDATE SET
    ok = r.ok + excluded.ok,
    failed = r.failed + excluded.failed,
    retried = r.retried + excluded.retried,
    wait_hist = ARRAY(
        SELECT COALESCE(a, 0) + COALESCE(b, 0)
        FROM unnest(r.wait_hist, excluded.wait_hist) WITH ORDINALITY AS h(a, b, n)
        ORDER BY n),
    run_hist = ARRAY(
        SELECT COALESCE(a, 0) + COALESCE(b, 0)
        FROM unnest(r.run_hist, excluded.run_hist) WITH ORDINALITY AS h(a, b, n)
        ORDER BY n)"""


#: ``rollup_add``'s filter inside a completion statement whose written rows are its
#: ``done`` CTE: count the batch only if every id of ``%(ids)s`` was written (a batch
#: with a lost lease is counted afterwards, for the rows it wrote: rollup/store.py).
ALL_IDS_WRITTEN = (
    "WHERE (SELECT pg_catalog.count(*) FROM done)"
    " = pg_catalog.cardinality((SELECT %(ids)s::bigint[]))"
)

_ROLLUP_ADD = rollup_add()
ROLLUP_RECORD = f"/* pgqueue:rollup_record */\n{_ROLLUP_ADD}\n"

# The depth of every job queue, sampled once a minute by whichever worker comes
# first: the ``NOT EXISTS`` is a one-time filter, so the others' tries in the same
# minute cost an index probe, not a count. Queues seen in the last hour with nothing
# waiting now get a 0 (otherwise a drained queue's chart would end at its last
# backlog). The count reads the due index (claimable rows only).
ROLLUP_SAMPLE_DEPTH = f"""/* pgqueue:rollup_depth */
INSERT INTO {ROLLUP_TABLE} AS r
    (kind, name, minute, depth, ok, failed, retried, wait_hist, run_hist)
SELECT 'queue', COALESCE(c.name, k.name), pg_catalog.date_trunc('minute', now()),
       COALESCE(c.depth, 0), 0, 0, 0, '{{}}', '{{}}'
FROM (SELECT queue_name AS name, pg_catalog.count(*) AS depth FROM {JOB_TABLE}
      WHERE status IN {CLAIMABLE_SQL} GROUP BY queue_name) AS c
FULL JOIN (SELECT DISTINCT name FROM {ROLLUP_TABLE}
           WHERE kind = 'queue' AND minute > now() - interval '1 hour') AS k
       ON k.name = c.name
WHERE NOT EXISTS (
    SELECT 1 FROM {ROLLUP_TABLE}
    WHERE kind = 'queue' AND minute = pg_catalog.date_trunc('minute', now())
      AND depth IS NOT NULL)
ON CONFLICT (kind, name, minute) DO UPDATE SET depth = excluded.depth
"""

# The message queues' sampler (``rollup/store.py``, ``sample_message_queues``) starts
# here: the minute it would write (the database clock's, or the caller's) and
# whether a worker has written it already, an index probe; the others' tries in
# the same minute stop at this.
ROLLUP_MQ_SAMPLED = f"""/* pgqueue:rollup_mq_sampled */
SELECT t.minute, EXISTS (SELECT 1 FROM {ROLLUP_TABLE} AS r
                         WHERE r.kind = 'mq' AND r.minute = t.minute)
FROM (SELECT COALESCE(%(minute)s::timestamptz,
                      pg_catalog.date_trunc('minute', now())) AS minute) AS t
"""

# Each message queue's last sampled minute within ``gap`` seconds before
# ``minute``, with the counters' marks it kept (``run_hist``, see
# ``rollup/store.py``): the base of the next minute's counts. Reads the ``minute``
# index over a few minutes of rows, whatever the retention holds.
ROLLUP_MQ_PREVIOUS = f"""/* pgqueue:rollup_mq_previous */
SELECT DISTINCT ON (name) name, minute, run_hist
FROM {ROLLUP_TABLE}
WHERE kind = 'mq' AND minute < %(minute)s
  AND minute >= %(minute)s::timestamptz - pg_catalog.make_interval(secs => %(gap)s)
ORDER BY name, minute DESC
"""

# One minute of every sampled message queue. DO NOTHING: two workers that sampled
# the same minute at once computed it from the same base, so the first one's rows
# stand and nothing is counted twice.
ROLLUP_MQ_WRITE = f"""/* pgqueue:rollup_mq_write */
INSERT INTO {ROLLUP_TABLE}
    (kind, name, minute, ok, failed, retried, wait_hist, run_hist, depth)
SELECT 'mq', v.name, %(minute)s, v.settled, v.archived, 0, '{{}}', v.marks::bigint[], v.depth
FROM unnest(%(names)s::text[], %(settled)s::bigint[], %(archived)s::bigint[],
            %(marks)s::text[], %(depths)s::bigint[])
    AS v(name, settled, archived, marks, depth)
ON CONFLICT (kind, name, minute) DO NOTHING
"""

# The rows of one kind since ``since`` seconds ago (the charts' window), oldest
# first; ``names`` narrows them (NULL: every name). Reads the primary key.
ROLLUP_READ = f"""/* pgqueue:rollup_read */
SELECT name, minute, ok, failed, retried, wait_hist, run_hist, depth
FROM {ROLLUP_TABLE}
WHERE kind = %(kind)s
  AND minute >= pg_catalog.date_trunc('minute', now())
                - pg_catalog.make_interval(secs => %(since)s)
  AND (%(names)s::text[] IS NULL OR name = ANY(%(names)s::text[]))
ORDER BY name, minute
"""

# Retention: one statement over the ``minute`` index; the table holds a row per
# active name and minute, so even a day of a thousand queues is a short delete.
ROLLUP_PRUNE = f"""/* pgqueue:rollup_prune */
DELETE FROM {ROLLUP_TABLE}
WHERE minute < now() - pg_catalog.make_interval(secs => %(age)s)
"""

# The application (its uid) of each endpoint a batch of deliveries went to, for the
# rollup's per-application rows; the store caches the answer, so this runs when a
# completer first meets an endpoint, not per batch.
ROLLUP_ENDPOINT_APPLICATIONS = f"""/* pgqueue:rollup_endpoint_applications */
SELECT e.id, a.uid
FROM {ENDPOINT_TABLE} AS e LEFT JOIN {APPLICATION_TABLE} AS a ON a.id = e.application_id
WHERE e.id = ANY(%(ids)s::bigint[])
"""
