"""Reads of the admin dashboard, ``pgqueue_status`` and the admin changelists."""

from __future__ import annotations

from .fragments import (
    APPLICATION_TABLE,
    CLAIMABLE_SQL,
    DELIVERY_TABLE,
    ENDPOINT_TABLE,
    JOB_TABLE,
    TERMINAL_SQL,
    WAITING_SQL,
)

# The planner's row estimate of a whole table, for admin changelists on big
# tables: ``COUNT(*)`` reads every row, ``reltuples`` is kept by VACUUM/ANALYZE
# and costs one catalogue lookup. -1 (never analysed) means "unknown".
ESTIMATED_ROWS = """/* pgqueue:estimated_rows */
SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)
"""

# Monitoring reads (dashboard, ``pgqueue_status``, the Prometheus gauges) must cost
# the backlog, not the history: a GROUP BY over the whole table took 77-222 ms at
# 100-300k rows and grew with retention. So one statement per table, in three
# parts:
# - the live states, exact, through the two partial indexes (the due rows and the
#   held rows; each branch's WHERE is its index's predicate, so the planner uses it);
# - the terminal states (succeeded, dead, cancelled) counted exactly while the table
#   holds at most EXACT_TERMINAL_ROWS rows by the planner's estimate (a scan of that
#   size costs milliseconds; -1, never analysed, is a new small table);
# - beyond that, the terminal states estimated from what ANALYZE keeps: the table's
#   ``reltuples`` times the frequency of each terminal state and of each common
#   value of the group column (the planner's own independence assumption), at the
#   cost of a catalogue lookup. The anyarray columns of pg_stats are read as text.
# The size test is a one-time filter: the part not chosen is never executed.
# ``now()`` comes back with the rows so ages are measured on the database clock.

#: Up to this many rows in a table, monitoring counts its terminal states exactly.
EXACT_TERMINAL_ROWS = 100_000


def overview(marker: str, table: str, column: str, cast_sql: str, *, waiting: bool = False) -> str:
    """Per value of the group ``column`` (of type ``cast_sql``) and state: count, oldest
    due time, lapsed, due, estimated. ``waiting``: also count the waiting workflow
    steps, exactly, through their partial index (jobs only: deliveries never wait)."""
    due_sql = f"status IN {CLAIMABLE_SQL} AND next_attempt_at <= now()"
    waiting_sql = (
        f"""
    UNION ALL
    SELECT {column}, status, next_attempt_at, locked_until FROM {table}
    WHERE status IN {WAITING_SQL}"""
        if waiting
        else ""
    )
    return f"""/* pgqueue:{marker} */
WITH size AS (
    SELECT c.reltuples AS n, ns.nspname
    FROM pg_catalog.pg_class AS c
    JOIN pg_catalog.pg_namespace AS ns ON ns.oid = c.relnamespace
    WHERE c.oid = pg_catalog.to_regclass('{table}')
), col AS (
    SELECT s.attname, v.val, v.freq
    FROM size, pg_catalog.pg_stats AS s,
         unnest(s.most_common_vals::text::text[], s.most_common_freqs) AS v(val, freq)
    WHERE s.schemaname = size.nspname AND s.tablename = '{table}'
      AND s.attname IN ('status', '{column}')
)
SELECT {column}, status::text, pg_catalog.count(*),
       pg_catalog.min(next_attempt_at) FILTER (WHERE {due_sql}),
       pg_catalog.count(*) FILTER (WHERE status = 'in_progress' AND locked_until < now()),
       now(),
       pg_catalog.count(*) FILTER (WHERE {due_sql}),
       false
FROM (
    SELECT {column}, status, next_attempt_at, locked_until FROM {table}
    WHERE status IN {CLAIMABLE_SQL}
    UNION ALL
    SELECT {column}, status, next_attempt_at, locked_until FROM {table}
    WHERE status = 'in_progress'{waiting_sql}
) AS live
GROUP BY 1, 2
UNION ALL
SELECT {column}, status::text, pg_catalog.count(*), NULL, 0, now(), 0, false
FROM {table}
WHERE status IN {TERMINAL_SQL}
  AND (SELECT n FROM size) <= {EXACT_TERMINAL_ROWS}
GROUP BY 1, 2
UNION ALL
SELECT g.val::{cast_sql}, st.val, pg_catalog.round(size.n * st.freq * g.freq)::bigint,
       NULL, 0, now(), 0, true
FROM size, col AS st, col AS g
WHERE size.n > {EXACT_TERMINAL_ROWS}
  AND st.attname = 'status' AND st.val IN {TERMINAL_SQL} AND g.attname = '{column}'
"""


JOB_OVERVIEW = overview("overview", JOB_TABLE, "queue_name", "text", waiting=True)
_DELIVERY_COUNTS = overview("delivery_counts", DELIVERY_TABLE, "endpoint_id", "bigint")

# The webhook half of the dashboard: every endpoint (its switch and circuit) with
# its deliveries per state, counted as above. LEFT JOIN so an endpoint without
# deliveries still shows. The application's uid (a subquery by primary key)
# groups the endpoints that are not delivering.
DELIVERY_OVERVIEW = f"""/* pgqueue:delivery_overview */
SELECT e.id, e.url, e.is_active, e.breaker_state, e.open_until, e.disabled_reason,
       (SELECT a.uid FROM {APPLICATION_TABLE} AS a WHERE a.id = e.application_id),
       d.status, d.count, d.oldest_due, d.lapsed, now(), d.due, d.estimated
FROM {ENDPOINT_TABLE} AS e LEFT JOIN (
{_DELIVERY_COUNTS}
) AS d(endpoint_id, status, count, oldest_due, lapsed, now, due, estimated)
    ON d.endpoint_id = e.id
ORDER BY e.id, d.status
"""
