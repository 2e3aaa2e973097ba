"""Every SQL statement of the message queues, with why it is shaped so.

Each queue has its own tables, so statements are templates: queue names become
identifiers only through ``psycopg.sql.Identifier`` (never formatted into text),
after ``validation.check_name``. ``statement()`` renders a template for one queue
once per process and caches the text; values are always ``%s`` parameters.

Rules kept by every statement:

* Time is ``clock_timestamp()``, not ``now()``: these statements run in the
  caller's transaction, whose ``now()`` is its start and may be long past. This is
  also pgmq's choice, so a visibility timeout means the same thing in both.
* A read is one statement: ``FOR UPDATE SKIP LOCKED`` in a ``MATERIALIZED`` CTE
  (the fence keeps the planner from running the row picking more than once and
  locking more than ``qty`` rows), then the UPDATE of those rows. It touches the
  queue table only, never the archive, so its cost follows waiting messages, not
  history.
* The rows a read picked are then written through the primary key, one probe
  each: ``WHERE msg_id = ANY(ARRAY(SELECT msg_id FROM picked))``, never a join
  with ``picked``. A queue drained under a held-back horizon is all dead rows, and
  its statistics say nothing is left (vacuum counts live rows only): a join then
  walked the whole table beside the one row picked (8,000 buffers for 4,000
  messages read and archived since the pin; tests/mq/test_scan_floor.py).
* Dead letters are moved by the read statement itself (data-modifying CTEs), so
  a message is either returned or moved, never both, and never lost in between.
* Built-in functions are written ``pg_catalog.<name>``: PostgreSQL picks the best
  match among every function on the caller's ``search_path``, so an unqualified
  ``make_interval(secs => 5)`` would run a ``public.make_interval(secs integer)``
  that anyone allowed to create functions there had planted. (``unnest`` with
  several arrays in FROM is the exception: the parser itself expands that form
  into calls of ``pg_catalog.unnest``, and a qualified name would not be expanded.)
* Messages and headers come back as ``text`` (``::text``), never as ``jsonb``
  decoded by the driver: ``store.py`` decodes them itself, one row at a time, so a
  row Python cannot decode (nesting too deep, an integer too long) is quarantined
  instead of failing the whole fetch after the read has hidden and counted it.
* Each statement starts with a ``/* pgqueue:mq_<name> */`` marker for
  ``pg_stat_statements``.
"""

from __future__ import annotations

from functools import lru_cache

from psycopg import sql as pgsql

REGISTRY = "pgqueue_mq_queue"
QUEUE_PREFIX = "pgqueue_mq_q_"
ARCHIVE_PREFIX = "pgqueue_mq_a_"
SEQUENCE_PREFIX = "pgqueue_mq_s_"
#: A day partition of a partitioned archive (``mq.create(archive_retention=...)``) is
#: ``pgqueue_mq_a_<name>@<YYYYMMDD>``: ``@`` is not allowed in a queue name, so no
#: other queue's archive can ever look like a partition of this one.
ARCHIVE_PARTITION_MARK = "@"
#: The FIFO index of one queue (``create_fifo_index``): ``pgqueue_mq_g_<name>`` fits
#: PostgreSQL's 63 bytes for every valid name, where ``..._q_<name>_group`` would not.
GROUP_INDEX_PREFIX = "pgqueue_mq_g_"
#: The table of topic bindings (``bind_topic``; migration 0023 creates it).
TOPIC_TABLE = "pgqueue_mq_topic_binding"
#: NOTIFY channel of one queue; the SQL API's ``send`` uses the same.
CHANNEL_PREFIX = "pgqueue_mq_"

#: Columns of pgmq's ``message_record``. ``last_read_at`` (pgmq 1.6+) comes last, not
#: fourth as in pgmq: clients written for pgmq 1.5 read the record by position, and
#: current ones by name, so both keep working (docs/message-queues.md).
MESSAGE_COLUMNS = "msg_id, read_ct, enqueued_at, vt, message, headers, last_read_at"


def identifiers(name: str) -> dict[str, pgsql.Identifier]:
    """The identifiers of queue ``name``'s objects (``name`` already validated)."""
    return {
        "q": pgsql.Identifier(QUEUE_PREFIX + name),
        "a": pgsql.Identifier(ARCHIVE_PREFIX + name),
        "seq": pgsql.Identifier(SEQUENCE_PREFIX + name),
        "q_vt": pgsql.Identifier(QUEUE_PREFIX + name + "_vt"),
        "a_id": pgsql.Identifier(ARCHIVE_PREFIX + name + "_id"),
        "g": pgsql.Identifier(GROUP_INDEX_PREFIX + name),
    }


def channel(name: str) -> str:
    return CHANNEL_PREFIX + name


# -- registry (plain text: the registry table has a fixed name) -----------------------

# The lookup every operation starts from (cached per process by store.py).
GET_QUEUE = f"""/* pgqueue:mq_get_queue */
SELECT name, unlogged, max_reads, dead_letter, created_at, archive_retention
FROM {REGISTRY} WHERE name = %s"""

# ON CONFLICT DO NOTHING: two concurrent creates of one queue serialize on the
# primary key; the second sees the first's row (after its commit) and creates
# nothing, so create is idempotent like pgmq's.
REGISTER_QUEUE = f"""/* pgqueue:mq_register */
INSERT INTO {REGISTRY} (name, unlogged, max_reads, dead_letter, archive_retention, created_at)
VALUES (%s, %s, %s, %s, %s, pg_catalog.now())
ON CONFLICT (name) DO NOTHING
RETURNING name"""

LIST_QUEUES = f"""/* pgqueue:mq_list */
SELECT name, unlogged, max_reads, dead_letter, created_at, archive_retention
FROM {REGISTRY} ORDER BY name"""

# A converted archive's retention (``mq.convert_archive_partitioned``), written in
# the conversion's swap transaction; the registry's checks refuse a retention out
# of range or a name too long for the partitions.
SET_ARCHIVE_RETENTION = f"""/* pgqueue:mq_convert_archive */
UPDATE {REGISTRY} AS r SET archive_retention = %s
WHERE r.name = %s AND r.archive_retention IS NULL"""

# The queues whose archive is partitioned by day (``partitions.py``): the workers'
# maintenance makes their partitions ahead and retention drops the old ones. The
# retention in seconds; the archive's relkind tells one whose table is partitioned
# ('p') from a registry row whose tables are missing (NULL).
PARTITIONED_ARCHIVES = f"""/* pgqueue:mq_partitioned_archives */
SELECT r.name, EXTRACT(epoch FROM r.archive_retention)::float8
FROM {REGISTRY} AS r
JOIN pg_catalog.pg_class AS a
  ON a.relname = '{ARCHIVE_PREFIX}' || r.name AND a.relkind = 'p'
 AND a.relnamespace = (SELECT c.relnamespace FROM pg_catalog.pg_class AS c
                       WHERE c.oid = '{REGISTRY}'::regclass)
WHERE r.archive_retention IS NOT NULL
ORDER BY r.name"""

UNREGISTER_QUEUE = f"/* pgqueue:mq_unregister */ DELETE FROM {REGISTRY} WHERE name = %s"

# Queues that send their dead letters to this one (a drop must refuse).
DEAD_LETTER_SOURCES = f"""/* pgqueue:mq_dead_letter_sources */
SELECT name FROM {REGISTRY} WHERE dead_letter = %s ORDER BY name"""

# The console's rollup sampler (rollup/store.py, ``sample_message_queues``), once a
# minute: each queue's counters, from the catalogue alone, so the send, read,
# delete and archive statements of both doors stay as they are and pay nothing.
# msg_id's sequence gives the messages ever sent (NULL: never used, or not
# readable by this role); PostgreSQL's cumulative statistics give the rows ever
# deleted from the queue table (every delete, archive, pop and dead-letter move)
# and ever inserted into its archive (the sum over its partitions, for a
# partitioned archive: a partition dropped by retention takes its count with it,
# which the sampler reads as a counter started again), and its estimate of the
# queue's rows. The
# tables are found by name in the registry's own schema, so a queue whose tables
# are gone (dropped between the registry read and now) simply has no row here,
# and its oid tells a queue dropped and created again from the one sampled last.
SAMPLE_COUNTERS = f"""/* pgqueue:mq_sample_counters */
SELECT r.name, q.oid::bigint,
       CASE WHEN pg_catalog.has_sequence_privilege(s.oid, 'SELECT')
            THEN COALESCE(pg_catalog.pg_sequence_last_value(s.oid), 0) END,
       pg_catalog.pg_stat_get_tuples_deleted(q.oid),
       COALESCE(CASE WHEN a.relkind = 'p' THEN
                    (SELECT pg_catalog.sum(pg_catalog.pg_stat_get_tuples_inserted(t.relid))::bigint
                     FROM pg_catalog.pg_partition_tree(a.oid) AS t WHERE t.isleaf)
                ELSE pg_catalog.pg_stat_get_tuples_inserted(a.oid) END, 0),
       pg_catalog.pg_stat_get_live_tuples(q.oid),
       r.created_at
FROM {REGISTRY} AS r
JOIN pg_catalog.pg_class AS q
  ON q.relname = '{QUEUE_PREFIX}' || r.name AND q.relkind = 'r'
 AND q.relnamespace = (SELECT c.relnamespace FROM pg_catalog.pg_class AS c
                       WHERE c.oid = '{REGISTRY}'::regclass)
LEFT JOIN pg_catalog.pg_class AS s
  ON s.relname = '{SEQUENCE_PREFIX}' || r.name AND s.relkind = 'S'
 AND s.relnamespace = q.relnamespace
LEFT JOIN pg_catalog.pg_class AS a
  ON a.relname = '{ARCHIVE_PREFIX}' || r.name AND a.relkind IN ('r', 'p')
 AND a.relnamespace = q.relnamespace
ORDER BY r.name"""

NOTIFY = "/* pgqueue:mq_notify */ SELECT pg_catalog.pg_notify(%s, '')"

# -- per-queue templates ---------------------------------------------------------------

# msg_id comes from a sequence with a fixed name, so metrics can read "total
# messages ever sent" from it. UNLOGGED makes the message table (and its
# sequence) skip the WAL: a crash empties it. The archive is always logged, as in
# pgmq: what was archived stays. msg_id is not unique in the archive because an
# unlogged queue's sequence starts again after a crash.
#: The columns after msg_id, shared by a queue's table and its archive (and by the
#: SQL API's create, which builds the same tables).
QUEUE_COLUMNS = """read_ct integer NOT NULL DEFAULT 0,
    enqueued_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    last_read_at timestamptz,
    vt timestamptz NOT NULL,
    message jsonb,
    headers jsonb
"""

#: How a partitioned archive is partitioned (its day partitions: ``partitions.py``).
ARCHIVE_PARTITIONING = "PARTITION BY RANGE (archived_at)"

# Converting a queue's plain archive into a partitioned one, online (Python:
# ``mq.convert_archive_partitioned``; SQL API: ``convert_archive_partitioned``), as
# migration 0002 converted the attempt log. No archived message moves: the archive
# becomes the partition that holds every day before ``{cutoff}`` (two UTC midnights
# ahead, so no message archived meanwhile falls outside it), named as the day
# partition of the day before the cutoff, from MINVALUE; retention drops it whole
# once that day is past the queue's retention, as any day partition.
#
# * ``check``, then ``validate`` (its own transaction in Python: it scans the
#   archive under SHARE UPDATE EXCLUSIVE, so archives go on being written): the
#   check proves the partition's bound, and the attach below scans nothing.
# * ``swap`` (one short transaction, under ACCESS EXCLUSIVE on the archive): the
#   archive and its index take the partition's names, the partitioned parent takes
#   the archive's (its index adopts the old one), and the old table is attached.
# Placeholders: ``{a}``/``{a_id}`` the archive and its index (schema-qualified in
# the SQL API), ``{legacy}``/``{legacy_id}``/``{a_id_name}``/``{check}`` bare
# names, ``{legacy_table}`` the legacy partition qualified as ``{a}`` is.
CONVERT_ARCHIVE = {
    "check": "/* pgqueue:mq_convert_archive */ ALTER TABLE {a} "
    "ADD CONSTRAINT {check} CHECK (archived_at < {cutoff}) NOT VALID",
    "validate": "/* pgqueue:mq_convert_archive */ ALTER TABLE {a} VALIDATE CONSTRAINT {check}",
    # A conversion that failed before its swap takes its check away again (or the
    # check would refuse every archive after the cutoff); so does one that starts
    # over after an interrupted run.
    "undo": "/* pgqueue:mq_convert_archive */ ALTER TABLE {a} DROP CONSTRAINT IF EXISTS {check}",
    "swap": [
        "/* pgqueue:mq_convert_archive */ LOCK TABLE {a} IN ACCESS EXCLUSIVE MODE",
        "/* pgqueue:mq_convert_archive */ ALTER TABLE {a} RENAME TO {legacy}",
        "/* pgqueue:mq_convert_archive */ ALTER INDEX {a_id} RENAME TO {legacy_id}",
        "/* pgqueue:mq_convert_archive */ CREATE TABLE {a} (LIKE {legacy_table} INCLUDING "
        "DEFAULTS) " + ARCHIVE_PARTITIONING,
        "/* pgqueue:mq_convert_archive */ CREATE INDEX {a_id_name} ON {a} (msg_id)",
        "/* pgqueue:mq_convert_archive */ ALTER TABLE {a} ATTACH PARTITION {legacy_table} "
        "FOR VALUES FROM (MINVALUE) TO ({cutoff})",
    ],
}
#: Suffixes (after ``ARCHIVE_PREFIX`` and the name) of the check and of the old
#: index's new name: ``@`` as in the partitions' names, never a day.
CONVERT_CHECK_SUFFIX = "@before"
CONVERT_INDEX_SUFFIX = "@old_id"

_CREATE = {
    "create_queue": """/* pgqueue:mq_create */
CREATE {persistence} TABLE {q} (
    msg_id bigint GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME {seq}) PRIMARY KEY,
    """
    + QUEUE_COLUMNS
    + ")",
    "create_queue_index": "/* pgqueue:mq_create */ CREATE INDEX {q_vt} ON {q} (vt)",
    "create_archive": """/* pgqueue:mq_create */
CREATE TABLE {a} (
    msg_id bigint NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    """
    + QUEUE_COLUMNS
    + ") {partitioning}",
    "create_archive_index": "/* pgqueue:mq_create */ CREATE INDEX {a_id} ON {a} (msg_id)",
}

# Pieces shared by the reads (templates: {q} is the queue table).
_PICK = """
    SELECT {columns} FROM {{q}}
    WHERE vt <= pg_catalog.clock_timestamp(){floor}
    ORDER BY msg_id
    LIMIT %s
    FOR UPDATE SKIP LOCKED
"""
# The scan floor of a consumer's reads (mq/store.py, ``claim``; the jobs' floor is
# explained in sql/jobs.py). A read walks the primary key from its head, past every
# message archived or deleted since the oldest snapshot still open: under a
# held-back xmin horizon those dead versions pile up there (85 ms a read nine
# minutes into a pin at 100 messages a second). A *floored* read looks only at the
# messages that became visible in the last ``%s`` seconds: their ids, found by a
# range of the ``vt`` index (``vt`` is when a message became, or becomes, visible),
# then locked through the primary key in ``msg_id`` order, as any read. The range's
# bounds are ``now()``, stable, so the index can use them (``clock_timestamp()`` is
# volatile and never an index bound; the outer condition still rechecks it, also on
# a row a concurrent read changed). ``now()`` is the statement's start on the
# consumer's autocommit connection, the only caller. At most ``%s`` candidates, the
# earliest visible first: more than that is a backlog, which the next full read
# finds. A message below the floor (sent by a transaction that began long before it
# committed, or released with an old ``vt``) waits for the next full read.
#
# The SQL API's ``read`` runs the same condition (``floor_for_plpgsql``), its state
# kept per session (sql_api.py, ``_floor``).
FLOOR_CONDITION = """msg_id = ANY(ARRAY(
          SELECT msg_id FROM {q}
          WHERE vt >= pg_catalog.now() - pg_catalog.make_interval(secs => %s::float8)
            AND vt <= pg_catalog.now()
          ORDER BY vt LIMIT %s))"""
_FLOOR = "\n      AND " + FLOOR_CONDITION
#: The most candidates a floored read looks at, at least four times its ``qty``: room
#: for the messages concurrent reads hold locked.
FLOOR_CANDIDATES = 1000
_RETURNING = "m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message, m.headers, m.last_read_at"
#: What a read hands to Python: the documents as text (see the module docstring), and
#: last_read_at last (``store.decode_row``).
_RETURNING_TEXT = (
    "m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message::text, m.headers::text, m.last_read_at"
)
#: The admin's browser reads these (with archived_at after them in the archive).
_COLUMNS_TEXT = "msg_id, read_ct, enqueued_at, vt, message::text, headers::text"
_DEAD = f"""dead AS (
    DELETE FROM {{q}} m
    WHERE m.msg_id = ANY(ARRAY(SELECT msg_id FROM picked WHERE dead))
    RETURNING {_RETURNING}
)"""


#: The header that records where a dead letter came from (the admin's move-back
#: reads it, and checks it against the queues' configuration).
DEAD_LETTER_HEADER = "x-pgqueue-dead-letter"
#: The header that records why a row was quarantined (store.py).
QUARANTINE_HEADER = "x-pgqueue-quarantine"

# The dead-letter header of a row of ``dead`` or ``gone`` (its queue name a parameter).
_DEAD_LETTER_NOTE = f"""pg_catalog.jsonb_build_object('{DEAD_LETTER_HEADER}',
                pg_catalog.jsonb_build_object('queue', %s::text, 'msg_id', msg_id,
                                              'read_ct', read_ct, 'enqueued_at', enqueued_at))"""


def _mark_read(condition: str = "") -> str:
    """The UPDATE that hides the picked messages for vt seconds and counts the read."""
    return f"""UPDATE {{q}} m
SET vt = pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => %s),
    read_ct = m.read_ct + 1,
    last_read_at = pg_catalog.clock_timestamp()
WHERE m.msg_id = ANY(ARRAY(SELECT msg_id FROM picked{condition}))
RETURNING {_RETURNING_TEXT}"""


#: The suffix of a read's floored variant (``_FLOOR``): ``read_floored``, ...
FLOORED = "_floored"


def _reads(floor: str = "") -> dict[str, str]:
    """The three reads (plain, and with each dead-letter target), with ``floor`` in
    the row picking: nothing, or ``_FLOOR``."""
    pick = _PICK.format(columns="msg_id", floor=floor)
    pick_dead = _PICK.format(columns="msg_id, read_ct >= %s AS dead", floor=floor)
    return {
        "read": f"""/* pgqueue:mq_read */
WITH picked AS MATERIALIZED ({pick})
{_mark_read()}""",
        # The read of a queue with max_reads: a picked message already read max_reads
        # times is deleted and inserted into the dead-letter target (another queue's
        # table, or this queue's archive) by the same statement; the others are
        # returned as by "read". The dead letter's headers record where it came from,
        # so the admin can move it back.
        "read_dead_letter_queue": f"""/* pgqueue:mq_read_dlq */
WITH picked AS MATERIALIZED ({pick_dead}),
{_DEAD}, moved AS (
    INSERT INTO {{dead}} (vt, message, headers)
    SELECT pg_catalog.clock_timestamp(), message,
           CASE WHEN headers IS NULL OR pg_catalog.jsonb_typeof(headers) = 'object'
           THEN COALESCE(headers, '{{{{}}}}') || {_DEAD_LETTER_NOTE}
           ELSE headers END
    FROM dead ORDER BY msg_id
)
{_mark_read(" WHERE NOT dead")}""",
        "read_dead_letter_archive": f"""/* pgqueue:mq_read_dla */
WITH picked AS MATERIALIZED ({pick_dead}),
{_DEAD}, moved AS (
    INSERT INTO {{a}} ({MESSAGE_COLUMNS})
    SELECT {MESSAGE_COLUMNS} FROM dead
)
{_mark_read(" WHERE NOT dead")}""",
    }


_TEMPLATES = {
    **_CREATE,
    "drop": "/* pgqueue:mq_drop */ DROP TABLE IF EXISTS {q}, {a}",
    # The delay is either an absolute instant or seconds from now (one statement
    # for both keeps one cached plan).
    "send": """/* pgqueue:mq_send */
INSERT INTO {q} (vt, message, headers)
VALUES (COALESCE(%s::timestamptz,
                 pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => %s)),
        %s::jsonb, %s::jsonb)
RETURNING msg_id""",
    # One INSERT for the batch; the arrays arrive as single text[] literals (cheaper
    # to adapt than a list of values) and unnest keeps their order, which is the
    # order of the identities and of the returned ids.
    "send_batch": """/* pgqueue:mq_send_batch */
INSERT INTO {q} (vt, message, headers)
SELECT COALESCE(%s::timestamptz,
                pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => %s)), m, h
FROM unnest(%s::text[]::jsonb[], %s::text[]::jsonb[]) WITH ORDINALITY AS t(m, h, n)
ORDER BY n
RETURNING msg_id""",
    **_reads(),
    **{kind + FLOORED: text for kind, text in _reads(_FLOOR).items()},
    # Read and delete at once: at-most-once delivery.
    "pop": f"""/* pgqueue:mq_pop */
WITH picked AS MATERIALIZED ({_PICK.format(columns="msg_id", floor="")})
DELETE FROM {{q}} m
WHERE m.msg_id = ANY(ARRAY(SELECT msg_id FROM picked))
RETURNING {_RETURNING_TEXT}""",
    # An instant or seconds from now, as "send"'s delay (pgmq 1.6+ takes both).
    "set_vt": f"""/* pgqueue:mq_set_vt */
UPDATE {{q}} SET vt = COALESCE(%s::timestamptz,
                          pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => %s))
WHERE msg_id = %s
RETURNING {_COLUMNS_TEXT}, last_read_at""",
    # Archive = move to the archive table in one statement.
    "archive": f"""/* pgqueue:mq_archive */
WITH gone AS (
    DELETE FROM {{q}} WHERE msg_id = ANY(%s::bigint[])
    RETURNING {MESSAGE_COLUMNS}
)
INSERT INTO {{a}} ({MESSAGE_COLUMNS})
SELECT {MESSAGE_COLUMNS} FROM gone
RETURNING msg_id""",
    # The consumer's outcomes for one queue in one statement, each guarded by the
    # read_ct of the read that handed the message out (the fencing token): archive,
    # delete, retry after a delay, or release (visible at once, the read not
    # counted). Returns the msg_ids written.
    "settle": f"""/* pgqueue:mq_settle */
WITH o AS (
    SELECT * FROM unnest(%s::bigint[], %s::int[], %s::text[], %s::float8[])
        AS o(msg_id, read_ct, action, delay)
), gone AS (
    DELETE FROM {{q}} m USING o
    WHERE m.msg_id = o.msg_id AND m.read_ct = o.read_ct AND o.action IN ('archive', 'delete')
    RETURNING {_RETURNING}, o.action
), archived AS (
    INSERT INTO {{a}} ({MESSAGE_COLUMNS})
    SELECT {MESSAGE_COLUMNS} FROM gone WHERE action = 'archive'
), back AS (
    UPDATE {{q}} m
    SET vt = pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => o.delay),
        read_ct = m.read_ct - CASE WHEN o.action = 'release' THEN 1 ELSE 0 END
    FROM o
    WHERE m.msg_id = o.msg_id AND m.read_ct = o.read_ct AND o.action IN ('retry', 'release')
    RETURNING m.msg_id
)
SELECT msg_id FROM gone UNION ALL SELECT msg_id FROM back""",
    # The consumer's lease extension, guarded by read_ct like "settle".
    "extend": """/* pgqueue:mq_extend */
UPDATE {q} m SET vt = pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => %s)
FROM unnest(%s::bigint[], %s::int[]) AS o(msg_id, read_ct)
WHERE m.msg_id = o.msg_id AND m.read_ct = o.read_ct
RETURNING m.msg_id""",
    # After an ambiguous commit of "settle", the read_ct of each message still in
    # the queue: source.py takes a missing message as archived or deleted (the
    # write landed), the same read_ct as still held, another as read again since.
    # The queue table only, by primary key: the archive is not needed to tell these
    # apart, and it grows with history.
    "read_counts": """/* pgqueue:mq_read_counts */
SELECT msg_id, read_ct FROM {q} WHERE msg_id = ANY(%s::bigint[])""",
    # ``--burst``: whether a read would find anything now. EXISTS stops at the first
    # visible row (the vt index), however long the queue.
    "any_visible": """/* pgqueue:mq_any_visible */
SELECT EXISTS (SELECT 1 FROM {q} WHERE vt <= pg_catalog.clock_timestamp())""",
    "delete": """/* pgqueue:mq_delete */
DELETE FROM {q} WHERE msg_id = ANY(%s::bigint[]) RETURNING msg_id""",
    # DELETE, not pgmq's TRUNCATE: TRUNCATE takes an ACCESS EXCLUSIVE lock (every
    # reader and sender of the queue waits for the caller's commit) and is not
    # MVCC-safe for concurrent snapshots.
    "purge": """/* pgqueue:mq_purge */
WITH gone AS (DELETE FROM {q} RETURNING 1) SELECT pg_catalog.count(*) FROM gone""",
    # pgmq's metrics_result columns, in its order. Total messages ever sent is the
    # sequence's position (0 before the first send).
    "metrics": """/* pgqueue:mq_metrics */
SELECT pg_catalog.count(*),
       EXTRACT(epoch FROM pg_catalog.clock_timestamp() - pg_catalog.max(enqueued_at))::int,
       EXTRACT(epoch FROM pg_catalog.clock_timestamp() - pg_catalog.min(enqueued_at))::int,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {seq}),
       pg_catalog.clock_timestamp(),
       pg_catalog.count(*) FILTER (WHERE vt <= pg_catalog.clock_timestamp())
FROM {q}""",
    # The admin's list and pgqueue_status: the archive size is exact up to 10,000
    # rows (a bounded count: the planner's reltuples alone stays 0 until the first
    # VACUUM or ANALYZE, so a freshly archived message did not show), and beyond that
    # the planner's estimate, summed over its partitions for a partitioned archive
    # (counting a million archived rows on every page view is not worth it). In
    # flight: hidden by a read; the rest of the hidden ones are delayed sends. The
    # oldest visible message's wait counts from its vt (when it became visible), as a
    # job's from its run-at: a queue nobody reads shows it growing.
    "stats": """/* pgqueue:mq_stats */
SELECT pg_catalog.count(*),
       pg_catalog.count(*) FILTER (WHERE vt <= pg_catalog.clock_timestamp()),
       EXTRACT(epoch FROM pg_catalog.clock_timestamp() - pg_catalog.min(enqueued_at)),
       (SELECT CASE WHEN counted.n < 10000 THEN counted.n
                    ELSE GREATEST(counted.n, estimated.n) END
          FROM (SELECT pg_catalog.count(*) AS n FROM (SELECT 1 FROM {a} LIMIT 10000) AS s)
               AS counted,
               (SELECT pg_catalog.sum(GREATEST(c.reltuples, 0))::bigint AS n
                  FROM (SELECT %s::regclass AS oid) AS archive, pg_catalog.pg_class AS c
                 WHERE c.relkind = 'r'
                   AND (c.oid = archive.oid
                        OR c.oid IN (SELECT t.relid
                                     FROM pg_catalog.pg_partition_tree(archive.oid) AS t)))
               AS estimated),
       pg_catalog.count(*) FILTER (WHERE vt > pg_catalog.clock_timestamp() AND read_ct > 0),
       EXTRACT(epoch FROM pg_catalog.clock_timestamp()
               - pg_catalog.min(vt) FILTER (WHERE vt <= pg_catalog.clock_timestamp()))
FROM {q}""",
    # The console's rollup sampler (rollup/store.py, ``sample_message_queues``): the
    # visible messages, counted exactly up to a bound (the ``LIMIT``, by the vt index,
    # so a queue of millions costs what a queue of the bound does); at the bound the
    # sampler takes PostgreSQL's estimate of the queue's rows instead.
    "depth": """/* pgqueue:mq_depth */
SELECT pg_catalog.count(*) FROM (
    SELECT 1 FROM {q} WHERE vt <= pg_catalog.clock_timestamp() LIMIT %s) AS visible""",
    "browse": f"""/* pgqueue:mq_browse */
SELECT {_COLUMNS_TEXT} FROM {{q}}
ORDER BY msg_id LIMIT %s OFFSET %s""",
    "browse_archive": f"""/* pgqueue:mq_browse_archive */
SELECT {_COLUMNS_TEXT}, archived_at FROM {{a}}
ORDER BY archived_at DESC, msg_id DESC LIMIT %s OFFSET %s""",
    # Move-back's view of some messages: the origin each dead letter's header names,
    # read by PostgreSQL (a header Python cannot decode still names its origin;
    # ``->`` on a header that is not an object is NULL, not an error). FOR UPDATE:
    # the rows cannot change between this answer and the move.
    "dead_letter_origins": f"""/* pgqueue:mq_dead_letter_origins */
SELECT msg_id, headers -> '{DEAD_LETTER_HEADER}'::text ->> 'queue'::text FROM {{q}}
WHERE msg_id = ANY(%s::bigint[]) ORDER BY msg_id FOR UPDATE""",
    # Move messages to another queue (a dead letter back to where it came from):
    # new ids there, visible at once, read count starting again; the dead-letter
    # header is dropped.
    "move": """/* pgqueue:mq_move */
WITH gone AS (
    DELETE FROM {q} WHERE msg_id = ANY(%s::bigint[])
    RETURNING msg_id, message, headers
)
INSERT INTO {target} (vt, message, headers)
SELECT pg_catalog.clock_timestamp(), message,
       NULLIF(headers - 'x-pgqueue-dead-letter'::text, '{{}}'::jsonb)
FROM gone ORDER BY msg_id
RETURNING msg_id""",
}


# -- FIFO groups (pgmq 1.8+) --------------------------------------------------------------
#
# A message's group is its ``x-pgmq-group`` header (text), or one default group for the
# messages without it: pgmq's rule, so a message sent by a pgmq client lands in the
# same group here. Within a group messages are handed out in msg_id order and never
# past one still in flight: a group is eligible only while its head (its oldest
# message, whatever its visibility) is visible. A delayed head holds its group back,
# as in pgmq.
#
# Shape of the three reads (one statement each, like "read"):
#
# * ``heads``: the head of every group (DISTINCT ON walks the FIFO index when the
#   queue has one, else one scan of the queue table);
# * ``eligible``: the visible heads, oldest first, at most qty of them (no read can use
#   more groups than messages), each LOCKED with SKIP LOCKED. The lock on the head is
#   the group's lock: a concurrent grouped read skips a group whose head another holds,
#   and a read that finds the head already read and committed re-checks ``vt`` on the
#   new row version and leaves the group. So two readers never split a group (pgmq
#   takes an advisory lock per group for this; the row lock needs no hash and is
#   released with the row's own transaction);
# * ``ranked``: the visible messages of each eligible group from its head on, at most
#   qty of them (no read takes more from one group; one for the heads), numbered
#   within the group: a range of the FIFO index per group when the queue has one. The
#   three reads differ only in how these are ordered (``ORDER BY``): the oldest group
#   first and all it has (``read_grouped``, SQS-style), layers across groups
#   (``read_grouped_rr``), or heads only (``read_grouped_head``);
# * ``picked``: the first qty of them, locked; ``vt`` is tested again on the locked row
#   (the recheck runs at this level only), then the UPDATE of "read".
#
# The answer comes out in that order. ``{doc}`` is ``::text`` for Python (store.py
# decodes the documents) and empty for the SQL API, which returns jsonb.
GROUP_KEY_SQL = "COALESCE(headers ->> 'x-pgmq-group'::text, '_default_fifo_group'::text)"


def _grouped(order_sql: str, where_sql: str = "") -> str:
    return f"""WITH heads AS (
    SELECT DISTINCT ON ({GROUP_KEY_SQL}) msg_id, {GROUP_KEY_SQL} AS grp
    FROM {{q}} ORDER BY {GROUP_KEY_SQL}, msg_id
), eligible AS MATERIALIZED (
    SELECT q.msg_id AS head, heads.grp FROM heads JOIN {{q}} q ON q.msg_id = heads.msg_id
    WHERE q.vt <= pg_catalog.clock_timestamp()
    ORDER BY q.msg_id
    LIMIT %s
    FOR UPDATE OF q SKIP LOCKED
), ranked AS (
    SELECT m.msg_id, eligible.head, m.n
    FROM eligible CROSS JOIN LATERAL (
        SELECT g.msg_id, pg_catalog.row_number() OVER (ORDER BY g.msg_id) AS n
        FROM {{q}} g
        WHERE {GROUP_KEY_SQL.replace("headers", "g.headers")} = eligible.grp
          AND g.msg_id >= eligible.head AND g.vt <= pg_catalog.clock_timestamp()
        ORDER BY g.msg_id
        LIMIT %s
    ) m
), ordered AS (
    SELECT msg_id, pg_catalog.row_number() OVER (ORDER BY {order_sql}) AS ord
    FROM ranked{where_sql}
), picked AS MATERIALIZED (
    SELECT m.msg_id, ordered.ord FROM ordered JOIN {{q}} m ON m.msg_id = ordered.msg_id
    WHERE ordered.ord <= %s AND m.vt <= pg_catalog.clock_timestamp()
    ORDER BY ordered.ord
    FOR UPDATE OF m SKIP LOCKED
), done AS (
    UPDATE {{q}} m
    SET vt = pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => %s),
        read_ct = m.read_ct + 1,
        last_read_at = pg_catalog.clock_timestamp()
    FROM picked
    WHERE m.msg_id = picked.msg_id
    RETURNING {_RETURNING}, picked.ord
)
SELECT msg_id, read_ct, enqueued_at, vt, message{{doc}}, headers{{doc}}, last_read_at
FROM done ORDER BY ord"""


_TEMPLATES.update(
    {
        "read_grouped": "/* pgqueue:mq_read_grouped */\n" + _grouped("head, n"),
        "read_grouped_rr": "/* pgqueue:mq_read_grouped_rr */\n" + _grouped("n, head"),
        "read_grouped_head": "/* pgqueue:mq_read_grouped_head */\n"
        + _grouped("head", " WHERE n = 1"),
        # pgmq's create_fifo_index makes a GIN index on headers; the reads above look a
        # group up by its key and walk it in msg_id order, which a btree on exactly
        # that expression serves (DISTINCT ON for the heads, the join for the rest).
        # IF NOT EXISTS: calling it twice is harmless, as in pgmq.
        "create_fifo_index": f"""/* pgqueue:mq_create_fifo_index */
CREATE INDEX IF NOT EXISTS {{g}} ON {{q}} (({GROUP_KEY_SQL}), msg_id)""",
    }
)

# -- topic routing (pgmq 1.11+) -----------------------------------------------------------
#
# Templates over the bindings table ({b}: unqualified for Python, schema-qualified
# for the SQL API). The queue's name comes out as text (the registry's column is a
# varchar), the type of pgmq's records. The routing rule is the bindings table's ``compiled_regex``
# column, generated by PostgreSQL from the pattern (migration 0023: ``.`` escaped,
# ``*`` one segment ``[^.]+``, ``#`` any run ``.*``, anchored, as pgmq compiles
# it), and ``TOPIC_ROUTE`` below: both doors run that one statement.
_TOPIC = {
    # ON CONFLICT DO NOTHING: binding twice is a no-op, as in pgmq. The foreign key to
    # the registry (ON DELETE CASCADE) drops a queue's bindings with the queue.
    "bind": """/* pgqueue:mq_bind_topic */
INSERT INTO {b} (pattern, queue_name, bound_at)
VALUES (%s, %s, pg_catalog.clock_timestamp())
ON CONFLICT (pattern, queue_name) DO NOTHING""",
    "unbind": """/* pgqueue:mq_unbind_topic */
DELETE FROM {b} WHERE pattern = %s AND queue_name = %s RETURNING queue_name::text""",
    # The queues a routing key reaches: each once, however many of its patterns match,
    # by name (the order sends happen in, so concurrent fan-outs lock alike).
    "route": """/* pgqueue:mq_route */
SELECT DISTINCT queue_name::text FROM {b}
WHERE %s::text OPERATOR(pg_catalog.~) compiled_regex ORDER BY queue_name""",
    "test_routing": """/* pgqueue:mq_test_routing */
SELECT pattern, queue_name::text, compiled_regex FROM {b}
WHERE %s::text OPERATOR(pg_catalog.~) compiled_regex ORDER BY pattern, queue_name""",
    # Every binding, or one queue's (NULL: all), newest first as in pgmq.
    "list": """/* pgqueue:mq_list_topic_bindings */
SELECT pattern, queue_name::text, bound_at, compiled_regex FROM {b}
WHERE %s::text IS NULL OR queue_name = %s
ORDER BY bound_at DESC, pattern, queue_name""",
}


@lru_cache(maxsize=16)
def topic_statement(kind: str) -> str:
    """The text of topic statement ``kind`` for Python (the bindings table unqualified)."""
    return pgsql.SQL(_TOPIC[kind]).format(b=pgsql.Identifier(TOPIC_TABLE)).as_string(None)


# -- quarantine: rows Python cannot decode (store.py) -----------------------------------
#
# A quarantined row goes where the queue's dead letters go: the dead-letter queue when
# the queue has one (new id there, visible at once, with the dead-letter header so
# move-back knows its origin), otherwise the queue's own archive (as it was). Either
# way its headers gain a quarantine note naming the error; headers that are not an
# object are kept under "x-pgqueue-headers". The documents themselves are copied as
# PostgreSQL holds them: only Python could not read them.
_QUARANTINE_HEADERS = f"""CASE WHEN headers IS NULL OR pg_catalog.jsonb_typeof(headers) = 'object'
         THEN COALESCE(headers, '{{{{}}}}'::jsonb)
         ELSE pg_catalog.jsonb_build_object('x-pgqueue-headers', headers) END
    || pg_catalog.jsonb_build_object('{QUARANTINE_HEADER}', pg_catalog.jsonb_build_object(
         'queue', %s::text, 'msg_id', msg_id, 'read_ct', read_ct, 'error', error))"""
_INTO = {
    "archive": f"""INSERT INTO {{a}} (msg_id, read_ct, enqueued_at, vt, message, headers)
SELECT msg_id, read_ct, enqueued_at, vt, message, {_QUARANTINE_HEADERS}
FROM gone
RETURNING msg_id""",
    "queue": f"""INSERT INTO {{dead}} (vt, message, headers)
SELECT pg_catalog.clock_timestamp(), message, {_QUARANTINE_HEADERS} || {_DEAD_LETTER_NOTE}
FROM gone ORDER BY msg_id
RETURNING msg_id""",
}
# A row still in the queue (read, claimed, set_vt): taken out only if its read_ct is
# still the one of the read that found it undecodable (the fencing token of
# "settle"), so a row another reader holds by now is left to that reader.
_QUARANTINE_HELD = """WITH bad AS (
    SELECT * FROM unnest(%s::bigint[], %s::int[], %s::text[]) AS b(msg_id, read_ct, error)
), gone AS (
    DELETE FROM {q} m USING bad
    WHERE m.msg_id = bad.msg_id AND m.read_ct = bad.read_ct
    RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message, m.headers, bad.error
)
"""
# A row pop already deleted: put back from the text the pop returned (at most once
# still holds: it goes to the archive or the dead-letter queue, not to its queue).
_QUARANTINE_POPPED = """WITH gone AS (
    SELECT * FROM (VALUES (%s::bigint, %s::int, %s::timestamptz, %s::timestamptz,
                           %s::text::jsonb, %s::text::jsonb, %s::text))
        AS b(msg_id, read_ct, enqueued_at, vt, message, headers, error)
)
"""
for _target, _insert in _INTO.items():
    _TEMPLATES[f"quarantine_{_target}"] = (
        "/* pgqueue:mq_quarantine */\n" + _QUARANTINE_HELD + _insert
    )
    _TEMPLATES[f"quarantine_popped_{_target}"] = (
        "/* pgqueue:mq_quarantine */\n" + _QUARANTINE_POPPED + _insert
    )


def for_plpgsql(kind: str, **ids: pgsql.Composable) -> str:
    """Statement ``kind`` as a string literal for plpgsql's ``format()``: the queue table
    as ``%1$s``, the archive as ``%2$s``, the FIFO index as ``%3$s``, parameters as
    ``$1``, ``$2``, ... (for ``EXECUTE ... USING``); ``ids`` fills the other
    placeholders (a topic statement's ``{b}``). The SQL API runs the very statements
    of this module this way where a rule must not drift between the two doors (the
    fenced settle, the grouped reads, topic routing)."""
    parts = (_TEMPLATES.get(kind) or _TOPIC[kind]).split("%s")
    text = "".join(f"{part}${n}" for n, part in enumerate(parts[:-1], 1)) + parts[-1]
    if "%" in text:
        raise ValueError(f"statement {kind!r} holds a % that format() would read")
    rendered = pgsql.SQL(text).format(
        **{"q": pgsql.SQL("%1$s"), "a": pgsql.SQL("%2$s"), "g": pgsql.SQL("%3$s")},
        doc=pgsql.SQL(""),
        **ids,
    )
    return pgsql.Literal(rendered.as_string(None)).as_string(None)


def floor_for_plpgsql(first: int) -> str:
    """FLOOR_CONDITION for a plpgsql ``format()`` string: the queue table as ``%1$s``,
    its two parameters (the floor's age in seconds, the candidates) as ``$first`` and
    the next."""
    parts = FLOOR_CONDITION.replace("{q}", "%1$s").split("%s")
    return "".join(f"{part}${n}" for n, part in enumerate(parts[:-1], first)) + parts[-1]


@lru_cache(maxsize=4096)
def statement(
    kind: str,
    name: str,
    dead_letter: str | None = None,
    unlogged: bool = False,
    partitioned: bool = False,
) -> str:
    """The text of statement ``kind`` for queue ``name`` (validated), cached.

    ``dead_letter`` names the target queue of ``read_dead_letter_queue``,
    ``quarantine_queue`` and ``move``; ``unlogged`` chooses the persistence of
    ``create_queue``, ``partitioned`` whether ``create_archive`` makes a table
    partitioned by day of ``archived_at``.
    """
    ids: dict[str, pgsql.Composable] = dict(identifiers(name))
    if dead_letter is not None:
        ids["dead"] = ids["target"] = pgsql.Identifier(QUEUE_PREFIX + dead_letter)
    ids["persistence"] = pgsql.SQL("UNLOGGED" if unlogged else "")
    ids["partitioning"] = pgsql.SQL(ARCHIVE_PARTITIONING if partitioned else "")
    ids["doc"] = pgsql.SQL("::text")
    return pgsql.SQL(_TEMPLATES[kind]).format(**ids).as_string(None)
