"""Retention (``pgqueue_prune``) and the queue database's system check."""

from __future__ import annotations

from .fragments import (
    ATTEMPT_TABLE,
    DELIVERY_TABLE,
    EVENT_TABLE,
    JOB_TABLE,
    QUEUE_KEY_RATE_TABLE,
    QUEUE_TABLES,
)

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
      AND COALESCE(t.finished_at, t.updated_at) < now() - pg_catalog.make_interval(secs => r.age)
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
SELECT coalesce(pg_catalog.array_agg(id) FILTER (WHERE expired), '{{}}'), pg_catalog.max(id)
FROM walk
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
    WHERE ev.created_at < now() - pg_catalog.make_interval(secs => %(age)s)
      AND NOT EXISTS (SELECT 1 FROM {DELIVERY_TABLE} AS d WHERE d.event_id = ev.id)
    ORDER BY ev.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
"""

# Per-key rate state whose bucket is full again (``rate_tat`` past): the same as
# no row, which is how the claim reads a key it has no row of, so deleting it
# changes no limit. A batch at a time; a row the claim holds is skipped.
PRUNE_QUEUE_KEY_RATES = f"""/* pgqueue:prune_queue_key_rates */
DELETE FROM {QUEUE_KEY_RATE_TABLE} AS t
WHERE t.id IN (
    SELECT r.id FROM {QUEUE_KEY_RATE_TABLE} AS r WHERE r.rate_tat < now()
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
"""
# What a prune of them would delete (``--dry-run``).
PRUNE_COUNT_QUEUE_KEY_RATES = f"""/* pgqueue:prune_count_queue_key_rates */
SELECT pg_catalog.count(*) FROM {QUEUE_KEY_RATE_TABLE} WHERE rate_tat < now()
"""

# What a prune would delete, per state (``--dry-run``).
PRUNE_COUNT = """/* pgqueue:prune_count */
SELECT t.status, pg_catalog.count(*) FROM {table} AS t WHERE {expired}
GROUP BY t.status ORDER BY t.status
"""

# Events a prune would delete (``--dry-run``): those already without deliveries.
PRUNE_COUNT_EVENTS = f"""/* pgqueue:prune_count_events */
SELECT pg_catalog.count(*) FROM {EVENT_TABLE} AS ev
WHERE ev.created_at < now() - pg_catalog.make_interval(secs => %(age)s)
  AND NOT EXISTS (SELECT 1 FROM {DELIVERY_TABLE} AS d WHERE d.event_id = ev.id)
"""


def prune_candidates(table: str) -> str:
    """PRUNE_CANDIDATES for ``table`` (JOB_TABLE or DELIVERY_TABLE)."""
    if table not in QUEUE_TABLES:
        raise ValueError(f"not a queue table: {table!r}")
    return PRUNE_CANDIDATES.format(table=table, expired=_EXPIRED)


def prune_count(table: str) -> str:
    """PRUNE_COUNT for ``table`` (JOB_TABLE or DELIVERY_TABLE)."""
    if table not in QUEUE_TABLES:
        raise ValueError(f"not a queue table: {table!r}")
    return PRUNE_COUNT.format(table=table, expired=_EXPIRED)


# Which of the given tables the queue database lacks (system check W002).
# ``to_regclass`` resolves a name the way the queue's own statements will (through
# the search_path) and returns NULL instead of raising for a missing table.
MISSING_TABLES = """/* pgqueue:missing_tables */
SELECT t FROM unnest(%s::text[]) AS t WHERE to_regclass(quote_ident(t)) IS NULL ORDER BY t
"""
