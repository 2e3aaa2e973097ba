"""Reads of the admin dashboard, ``pgqueue_status`` and the admin changelists."""

from __future__ import annotations

from .fragments import (
    APPLICATION_TABLE,
    CLAIMABLE_SQL,
    DELIVERY_TABLE,
    ENDPOINT_TABLE,
    JOB_TABLE,
)

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
           WHERE status IN {CLAIMABLE_SQL} AND next_attempt_at <= now()),
       count(*) FILTER (WHERE status = 'in_progress' AND locked_until < now()),
       now(),
       count(*) FILTER (WHERE status IN {CLAIMABLE_SQL} AND next_attempt_at <= now())
FROM {JOB_TABLE}
GROUP BY queue_name, status
ORDER BY queue_name, status
"""

# The webhook half of the dashboard in one pass: every endpoint (its switch and
# circuit) with its deliveries per state, the oldest due time and lapsed leases.
# LEFT JOIN so an endpoint without deliveries still shows. The application's uid
# (a subquery by primary key) groups the endpoints that are not delivering.
DELIVERY_OVERVIEW = f"""/* pgqueue:delivery_overview */
SELECT e.id, e.url, e.is_active, e.breaker_state, e.open_until, e.disabled_reason,
       (SELECT a.uid FROM {APPLICATION_TABLE} AS a WHERE a.id = e.application_id),
       d.status, count(d.id),
       min(d.next_attempt_at) FILTER (
           WHERE d.status IN {CLAIMABLE_SQL} AND d.next_attempt_at <= now()),
       count(d.id) FILTER (WHERE d.status = 'in_progress' AND d.locked_until < now()),
       now(),
       count(d.id) FILTER (
           WHERE d.status IN {CLAIMABLE_SQL} AND d.next_attempt_at <= now())
FROM {ENDPOINT_TABLE} AS e LEFT JOIN {DELIVERY_TABLE} AS d ON d.endpoint_id = e.id
GROUP BY e.id, d.status
ORDER BY e.id, d.status
"""
