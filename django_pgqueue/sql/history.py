"""Job history: the mover, the partitions and the reads that fall back to history.

``pgqueue_job_history`` (created by the migration) has the live table's columns. It is
partitioned by LIST on ``status`` (one sub-table per terminal state, so each
state's retention drops its own partitions), each of those by RANGE on
``finished_at``, one partition per UTC day, created ahead by the workers'
maintenance (maintenance.py). There is no DEFAULT partition: a row whose day has
no partition yet makes the mover's statement fail as a whole (nothing moves), the
mover creates the missing days and tries again (docs/operations.md, "History and
retention").
"""

from __future__ import annotations

from collections.abc import Sequence

from ..states import TERMINAL
from .fragments import ATTEMPT_TABLE, JOB_TABLE, TERMINAL_SQL
from .jobs import JOB_ROW_COLUMNS

HISTORY_TABLE = "pgqueue_job_history"
#: The partitions of one terminal state: ``pgqueue_job_history_succeeded``...
HISTORY_STATE_TABLES = tuple(HISTORY_TABLE + "_" + state.value for state in TERMINAL)
#: A day's partition of one state: ``pgqueue_job_history_succeeded_p20261202``.
HISTORY_PARTITION_PATTERN = rf"^{HISTORY_TABLE}_(?P<key>[a-z]+)_p(?P<day>[0-9]{{8}})$"
#: A day's partition of the webhook attempt log: ``pgqueue_delivery_attempt_p20261202``
#: (its first one, made by the migration, also holds every earlier day).
ATTEMPT_PARTITION_PATTERN = rf"^{ATTEMPT_TABLE}_p(?P<day>[0-9]{{8}})$"

# Maintenance's lock (``pg_try_advisory_xact_lock``): one worker at a time moves
# and manages partitions; the others skip the pass. A transaction-level lock,
# so it holds behind PgBouncer in transaction mode too. The key is "pgqhist".
MAINTENANCE_LOCK_KEY = 0x7067716869737400
TRY_MAINTENANCE_LOCK = (
    "/* pgqueue:maintenance_lock */ SELECT pg_catalog.pg_try_advisory_xact_lock(%s)"
)


def move_jobs(columns: Sequence[str]) -> str:
    """MOVE_JOBS over the given columns (every column of ``pgqueue_job``).

    One data-modifying statement per batch: the oldest finished rows past the
    delay (through the live table's index of finished rows), locked with SKIP
    LOCKED so workers and operators are never waited on, deleted and inserted
    into history by the same statement. It commits or fails whole: a kill at any
    point leaves every row in exactly one of the two tables. A row replayed
    meanwhile is no longer terminal when its lock is granted, and the locking
    scan leaves it out (PostgreSQL tests the WHERE again on the latest version);
    the rows it locked cannot change before the DELETE, so the DELETE needs no
    state test. The picked ids are joined back through ``unnest`` of an array,
    as the claim does: a join with the CTE itself is estimated at one row and
    planned as a scan of the table per row (4 s a batch on a 20,000-row table),
    a state test in the DELETE made it rescan the finished rows' index instead;
    this way each row is one primary-key lookup. ``finished_at`` is the
    partition key: a job that never ran (cancelled while waiting) is filed under
    its last change.
    """
    names_sql = ", ".join(columns)
    values_sql = ", ".join(
        "COALESCE(m.finished_at, m.updated_at)" if column == "finished_at" else f"m.{column}"
        for column in columns
    )
    return f"""/* pgqueue:move_jobs */
WITH picked AS MATERIALIZED (
    SELECT id FROM {JOB_TABLE}
    WHERE status IN {TERMINAL_SQL}
      AND updated_at < now() - pg_catalog.make_interval(secs => %(delay)s)
    ORDER BY updated_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), moved AS (
    DELETE FROM {JOB_TABLE} AS j
    USING unnest(ARRAY(SELECT id FROM picked)) AS p(id)
    WHERE j.id = p.id
    RETURNING j.*
)
INSERT INTO {HISTORY_TABLE} ({names_sql})
SELECT {values_sql} FROM moved AS m
"""


def move_back(columns: Sequence[str]) -> str:
    """MOVE_BACK over the given columns (every column of ``pgqueue_job``): every
    history row back into the live table, in one statement (the way back to one
    table, docs/operations.md "Upgrading and rolling back"). It commits or fails
    whole; the ids are the jobs' own, below the live table's identity."""
    names_sql = ", ".join(columns)
    return f"""/* pgqueue:move_back */
WITH back AS (DELETE FROM {HISTORY_TABLE} RETURNING *)
INSERT INTO {JOB_TABLE} ({names_sql})
SELECT {names_sql} FROM back
"""


# The (state, day) pairs the next batch would file rows under: when the mover
# meets a day without a partition (no DEFAULT partition takes it), it creates
# these and moves again. Same candidates as MOVE_JOBS, without the locks.
NEXT_BATCH_DAYS = f"""/* pgqueue:next_batch_days */
SELECT DISTINCT status,
       pg_catalog.date_trunc('day', COALESCE(finished_at, updated_at), 'UTC')::date
FROM (
    SELECT status, finished_at, updated_at FROM {JOB_TABLE}
    WHERE status IN {TERMINAL_SQL}
      AND updated_at < now() - pg_catalog.make_interval(secs => %(delay)s)
    ORDER BY updated_at
    LIMIT %(limit)s
) AS next_batch
"""

# Maintenance's DDL waits at most this long for a lock, then gives up the pass (it
# is tried again at the next one): it never queues behind, and so never in front
# of, the queue's own statements.
DDL_LOCK_TIMEOUT = "/* pgqueue:ddl_lock_timeout */ SET LOCAL lock_timeout = '2s'"

# Whether a relation exists (by the search_path), and the database clock.
RELATION_EXISTS = "/* pgqueue:relation_exists */ SELECT pg_catalog.to_regclass(%s) IS NOT NULL"
DB_NOW = "/* pgqueue:db_now */ SELECT now()"

# Today by the database clock, as a UTC date: partitions are named and bounded by it.
TODAY_UTC = "/* pgqueue:today_utc */ SELECT (now() AT TIME ZONE 'UTC')::date"

# One day's partition: an empty table with the parent's columns, then attached.
# ATTACH takes SHARE UPDATE EXCLUSIVE on the parent (a state's table of the job
# history, or the attempt log: the mover, the writers and readers go on); creating
# it directly as PARTITION OF would take ACCESS EXCLUSIVE. The bounds are UTC
# midnights. Identifiers and bounds are composed with psycopg.sql by history.py.
CREATE_PARTITION = (
    "/* pgqueue:create_partition */ CREATE TABLE IF NOT EXISTS {partition} "
    "(LIKE {parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
)
ATTACH_PARTITION = (
    "/* pgqueue:attach_partition */ ALTER TABLE {parent} ATTACH PARTITION {partition} "
    "FOR VALUES FROM ({start}) TO ({end})"
)

# Retention: a partition leaves its state's table without blocking readers or the
# mover (CONCURRENTLY, which a DEFAULT partition would forbid), then is dropped.
# A detach interrupted by a kill leaves the partition "detach pending": FINALIZE
# completes it. A detached partition not yet dropped is found by its name.
DETACH_PARTITION = (
    "/* pgqueue:detach_partition */ ALTER TABLE {parent} DETACH PARTITION {partition} CONCURRENTLY"
)
FINALIZE_DETACH = (
    "/* pgqueue:finalize_detach */ ALTER TABLE {parent} DETACH PARTITION {partition} FINALIZE"
)
DROP_PARTITION = "/* pgqueue:drop_partition */ DROP TABLE IF EXISTS {partition}"

# Every day partition of one family (the job history's, the attempt log's),
# attached or left detached by an interrupted retention, with its parent (NULL once
# detached), whether a detach is pending, and whether it has no lower bound (the
# attempt log's first partition, the table as the previous release left it, holds
# every day up to its own). Read from the catalogue by name (``%(regex)s``, a
# PostgreSQL regular expression), in the schema the family's table resolves to
# (``%(table)s``, through the search_path).
DAY_PARTITIONS = """/* pgqueue:day_partitions */
SELECT c.relname::text, p.relname::text, COALESCE(i.inhdetachpending, false),
       c.reltuples::bigint,
       COALESCE(pg_catalog.pg_get_expr(c.relpartbound, c.oid) LIKE '%%(MINVALUE)%%', false)
FROM pg_catalog.pg_class AS c
LEFT JOIN pg_catalog.pg_inherits AS i ON i.inhrelid = c.oid
LEFT JOIN pg_catalog.pg_class AS p ON p.oid = i.inhparent
WHERE c.relkind = 'r'
  AND c.relnamespace = (SELECT relnamespace FROM pg_catalog.pg_class
                        WHERE oid = pg_catalog.to_regclass(%(table)s))
  AND c.relname::text ~ %(regex)s
ORDER BY c.relname
"""

# Whether a table is partitioned (the attempt log is, once its migration ran).
IS_PARTITIONED = (
    "/* pgqueue:is_partitioned */ SELECT COALESCE((SELECT relkind = 'p' FROM pg_catalog.pg_class"
    " WHERE oid = pg_catalog.to_regclass(%s)), false)"
)

# Exact rows of some history partitions (``pgqueue_prune --dry-run``).
COUNT_PARTITION = "/* pgqueue:count_partition */ SELECT pg_catalog.count(*) FROM {partition}"

_ROW_NAMES = ", ".join(JOB_ROW_COLUMNS)

# ``get_result``: the live row, else its history. One statement, so one snapshot:
# a row moved meanwhile is found in one table or the other, never in neither. The
# LIMIT stops at the live row, so a live job never reads history; the history
# branch is a primary-key probe per partition (``finished_at`` is unknown).
GET_JOB_OR_HISTORY = f"""/* pgqueue:get_result */
(SELECT {_ROW_NAMES} FROM {JOB_TABLE} WHERE id = %s)
UNION ALL
(SELECT {_ROW_NAMES} FROM {HISTORY_TABLE} WHERE id = %s LIMIT 1)
LIMIT 1
"""


def restore_jobs(columns: Sequence[str]) -> str:
    """RESTORE_JOBS over the given columns: history rows back into ``pgqueue_job``.

    One statement: deleted from history and inserted live as they are (still
    terminal), so the ordinary replay then applies its rules to them in the same
    transaction (operations.py). A row the replay refuses (a live job holds its
    unique key) stays live and terminal and the mover files it again.
    """
    names_sql = ", ".join(columns)
    return f"""/* pgqueue:restore_jobs */
WITH back AS (
    DELETE FROM {HISTORY_TABLE} WHERE id = ANY(%s::bigint[])
    RETURNING {names_sql}
)
INSERT INTO {JOB_TABLE} ({names_sql}) SELECT {names_sql} FROM back
RETURNING id
"""


# Finished jobs in history per queue and state, for the dashboard and
# ``pgqueue_status``: exact while the history holds at most ``%(exact)s`` rows by
# the catalogue's estimate (the partitions' ``reltuples``), else that estimate per
# state (without the queue: a partition's statistics are per partition).
HISTORY_COUNTS = f"""/* pgqueue:history_counts */
WITH size AS (
    SELECT COALESCE(pg_catalog.sum(GREATEST(c.reltuples, 0)), 0) AS n
    FROM pg_catalog.pg_partition_tree('{HISTORY_TABLE}') AS t
    JOIN pg_catalog.pg_class AS c ON c.oid = t.relid
    WHERE t.isleaf
)
SELECT queue_name::text, status::text, pg_catalog.count(*), false
FROM {HISTORY_TABLE}
WHERE (SELECT n FROM size) <= %(exact)s
GROUP BY 1, 2
UNION ALL
SELECT NULL, pg_catalog.split_part(p.relname::text, '_', 4),
       pg_catalog.sum(GREATEST(c.reltuples, 0))::bigint, true
FROM pg_catalog.pg_partition_tree('{HISTORY_TABLE}') AS t
JOIN pg_catalog.pg_class AS c ON c.oid = t.relid
JOIN pg_catalog.pg_class AS p ON p.oid = t.parentrelid
WHERE t.isleaf AND (SELECT n FROM size) > %(exact)s
GROUP BY 2
"""

# The sessions holding back the xmin horizon of this database (``pgqueue_status``):
# a transaction open longer than ``%(age)s`` seconds keeps every row version it
# might see, so vacuum cannot remove the dead rows of the queue's tables.
XMIN_HOLDERS = """/* pgqueue:xmin_holders */
SELECT pid, application_name, state,
       extract(epoch FROM now() - COALESCE(xact_start, backend_start))::float8 AS age,
       pg_catalog.age(backend_xmin) AS xmin_age
FROM pg_catalog.pg_stat_activity
WHERE datname = pg_catalog.current_database()
  AND backend_xmin IS NOT NULL
  AND pid <> pg_catalog.pg_backend_pid()
  AND now() - COALESCE(xact_start, backend_start)
      > pg_catalog.make_interval(secs => %(age)s)
ORDER BY xact_start
"""
