"""pgmq's SQL API over our message queues, for clients in other languages.

``install(schema)`` (the ``pgqueue_install_sql_api`` command) creates, in its own
schema, functions with pgmq's names, signatures and record types (the surface of
pgmq 1.13 that its current clients call: ``send``, ``read``, ``archive``,
``metrics``, ``enable_notify_insert``, ...), so that a pgmq client (with its option
to skip ``CREATE EXTENSION``), or ``psql``, or pg_cron, works on the queues of
``django_pgqueue.mq``: the
same registry and the same per-queue tables as the Python API, including dead
letters by read count and the NOTIFY that wakes Python readers.

The functions are plpgsql: queue names reach their dynamic SQL only through
``format('%I')`` (and are validated first, with the Python API's rules); the
schema of our tables is written into them at install time with
``psycopg.sql.Literal``. Everything is recreated by a new install, so upgrading
the package means running the command again.

FIFO group reads (``read_grouped*``) and topic routing (``bind_topic``,
``send_topic``, ...) run the statements and rules of the Python door
(``mq.grouped``, ``mq.topics``). ``create_partitioned`` takes time intervals only
and partitions the archive alone, by day (``mq.partitions``);
``convert_archive_partitioned`` runs the statements of
``mq.convert_archive_partitioned`` (``mq/sql.py``, ``CONVERT_ARCHIVE``) in its one
transaction. Beyond pgmq, ``archive`` and ``delete`` take a ``read_ct``
to match only the read that is still current.
"""

from __future__ import annotations

from typing import Any

from psycopg import sql as pgsql

from ..conf import get_settings
from ..history import PREMADE_DAYS
from ..scan_floor import ScanFloor
from ..sql.history import ATTACH_PARTITION, CREATE_PARTITION
from .grouped import KINDS as GROUPED_KINDS
from .partitions import CONVERT_CUTOFF_DAYS
from .sql import (
    ARCHIVE_PARTITION_MARK,
    ARCHIVE_PARTITIONING,
    ARCHIVE_PREFIX,
    CHANNEL_PREFIX,
    CONVERT_ARCHIVE,
    CONVERT_CHECK_SUFFIX,
    CONVERT_INDEX_SUFFIX,
    FLOOR_CANDIDATES,
    GROUP_INDEX_PREFIX,
    MESSAGE_COLUMNS,
    QUEUE_COLUMNS,
    QUEUE_PREFIX,
    REGISTRY,
    SEQUENCE_PREFIX,
    TOPIC_TABLE,
    floor_for_plpgsql,
    for_plpgsql,
)
from .validation import (
    MAX_BATCH,
    MAX_NAME_LENGTH,
    MAX_TOPIC_LENGTH,
    NAME_PATTERN,
    ROUTING_KEY_RULES,
    TOPIC_PATTERN_RULES,
)

#: Every function of the API runs with this search_path: built-ins resolve in
#: pg_catalog only (PostgreSQL picks the best match on the whole path, so a planted
#: ``public.make_interval(secs integer)`` would otherwise win over the built-in),
#: and our own objects are always written schema-qualified.
SEARCH_PATH = "SET search_path = pg_catalog, pg_temp"

#: The comment that marks a schema as ours, so a reinstall may replace it (and only it).
MARKER = "django_pgqueue: pgmq-compatible SQL API"


class SqlApiError(Exception):
    """The SQL API cannot be installed in (or removed from) that schema."""


# Braces are psycopg.sql placeholders: {api} is the API's schema (identifier),
# {data} the schema of our tables (literal, for format('%I.%I', ...)), {reg} the
# registry table (qualified identifier). Literal braces are doubled.
_DDL = """
CREATE SCHEMA {api};
COMMENT ON SCHEMA {api} IS {marker};

-- last_read_at last, not fourth as in pgmq 1.6+: clients written for pgmq 1.5 read
-- this record by position, current ones by name; both keep working.
CREATE TYPE {api}.message_record AS (
    msg_id bigint, read_ct integer, enqueued_at timestamptz, vt timestamptz,
    message jsonb, headers jsonb, last_read_at timestamptz
);
CREATE TYPE {api}.queue_record AS (
    queue_name varchar, is_partitioned boolean, is_unlogged boolean, created_at timestamptz
);
CREATE TYPE {api}.metrics_result AS (
    queue_name text, queue_length bigint, newest_msg_age_sec integer,
    oldest_msg_age_sec integer, total_messages bigint, scrape_time timestamptz,
    queue_visible_length bigint, default_partition_length bigint
);

-- pgmq's queue list, over the registry of django_pgqueue.mq.
CREATE VIEW {api}.meta AS
SELECT name::varchar AS queue_name, archive_retention IS NOT NULL AS is_partitioned,
       unlogged AS is_unlogged, created_at
FROM {reg};

CREATE FUNCTION {api}.validate_queue_name(queue_name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF length(queue_name) > {max_length} THEN
        RAISE EXCEPTION 'queue name is too long, maximum length is {max_length} characters';
    END IF;
    IF queue_name !~ {pattern} THEN
        RAISE EXCEPTION 'queue name % must be letters, digits, _ or -, starting with a letter or _',
            quote_literal(queue_name);
    END IF;
END $$;

-- The quoted, schema-qualified name of a queue's table (q), archive (a) or sequence (s).
CREATE FUNCTION {api}._rel(queue_name text, kind text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    PERFORM {api}.validate_queue_name(queue_name);
    RETURN format('%I.%I', {data}, CASE kind
        WHEN 'q' THEN {queue_prefix} WHEN 'a' THEN {archive_prefix} ELSE {sequence_prefix}
    END || queue_name);
END $$;

-- Create a queue as mq.create() does: registry row first (ON CONFLICT DO NOTHING
-- makes concurrent creates of one name serialize and the second a no-op; the
-- registry's checks refuse a retention out of range, or a name too long for the
-- partitions). With a retention, the archive is partitioned by day and gets its
-- first partitions here, by the statements maintenance uses (mq/partitions.py).
CREATE FUNCTION {api}._create(queue_name text, p_unlogged boolean, p_retention interval DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    q text := {api}._rel(queue_name, 'q');
    a text := {api}._rel(queue_name, 'a');
BEGIN
    INSERT INTO {reg} (name, unlogged, max_reads, dead_letter, archive_retention, created_at)
    VALUES (queue_name, p_unlogged, NULL, NULL, p_retention, now())
    ON CONFLICT (name) DO NOTHING;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    EXECUTE format(
        'CREATE %s TABLE %s (
            msg_id bigint GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME %s) PRIMARY KEY,
            {columns})',
        CASE WHEN p_unlogged THEN 'UNLOGGED' ELSE '' END, q, {api}._rel(queue_name, 's'));
    EXECUTE format('CREATE INDEX %I ON %s (vt)', {queue_prefix} || queue_name || '_vt', q);
    EXECUTE format(
        'CREATE TABLE %s (
            msg_id bigint NOT NULL,
            archived_at timestamptz NOT NULL DEFAULT now(),
            {columns}) %s', a, CASE WHEN p_retention IS NULL THEN '' ELSE {partitioning} END);
    EXECUTE format('CREATE INDEX %I ON %s (msg_id)', {archive_prefix} || queue_name || '_id', a);
    IF p_retention IS NOT NULL THEN
        PERFORM {api}._make_archive_days(queue_name, 0);
    END IF;
END $$;

-- The day partitions of a partitioned archive from today + first_offset to the
-- last day maintenance keeps made, by the statements maintenance uses (sql/history.py).
CREATE FUNCTION {api}._make_archive_days(queue_name text, first_offset integer)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    a text := {api}._rel(queue_name, 'a');
    today date := (now() AT TIME ZONE 'UTC')::date;
    part text;
BEGIN
    FOR i IN first_offset..{premade_days} LOOP
        part := format('%I.%I', {data},
                       {archive_prefix} || queue_name || {partition_mark} || to_char(today + i, 'YYYYMMDD'));
        EXECUTE format({create_partition}, part, a);
        EXECUTE format({attach_partition}, a, part,
                       quote_literal(to_char(today + i, 'YYYY-MM-DD') || ' 00:00:00+00'),
                       quote_literal(to_char(today + i + 1, 'YYYY-MM-DD') || ' 00:00:00+00'));
    END LOOP;
END $$;

CREATE FUNCTION {api}."create"(queue_name text) RETURNS void
LANGUAGE sql AS $$ SELECT {api}._create(queue_name, false) $$;
CREATE FUNCTION {api}.create_non_partitioned(queue_name text) RETURNS void
LANGUAGE sql AS $$ SELECT {api}._create(queue_name, false) $$;
CREATE FUNCTION {api}.create_unlogged(queue_name text) RETURNS void
LANGUAGE sql AS $$ SELECT {api}._create(queue_name, true) $$;
-- The intervals create_partitioned and convert_archive_partitioned accept.
CREATE FUNCTION {api}._check_intervals(
    fn text, queue_name text, partition_interval text, retention_interval text
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF partition_interval ~ '^ *[0-9]+ *$' OR retention_interval ~ '^ *[0-9]+ *$' THEN
        RAISE EXCEPTION '%: numeric intervals (partitions by msg_id) are not supported by django_pgqueue; give time intervals, e.g. %(%, ''1 day'', ''7 days''): the archive is partitioned by day of archived_at',
            fn, fn, quote_literal(queue_name) USING ERRCODE = 'feature_not_supported';
    END IF;
    IF partition_interval::interval <> interval '1 day' THEN
        RAISE EXCEPTION '%: partition_interval must be ''1 day'' (archives are partitioned by UTC day), got %',
            fn, quote_literal(partition_interval) USING ERRCODE = 'feature_not_supported';
    END IF;
END $$;

-- pgmq partitions a queue and its archive with pg_partman, by msg_id (numeric
-- intervals) or by time. Here only the archive is partitioned, by day of
-- archived_at, and retention_interval is how long archived messages are kept; the
-- queue's own table is never partitioned, so no waiting message is ever dropped.
CREATE FUNCTION {api}.create_partitioned(
    queue_name text, partition_interval text DEFAULT '10000',
    retention_interval text DEFAULT '100000'
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {api}._check_intervals('create_partitioned', queue_name, partition_interval, retention_interval);
    PERFORM {api}._create(queue_name, false, retention_interval::interval);
END $$;

-- pgmq's conversion of an existing archive, as mq.convert_archive_partitioned: the
-- archive becomes the partition of every day before a cutoff two UTC midnights
-- ahead, and no message moves. The same statements (mq/sql.py, CONVERT_ARCHIVE),
-- in this function's one transaction: the check's validation scans the archive
-- under the lock the check took, so this queue's archives wait for that scan
-- (Python's conversion validates in a transaction of its own). An archive
-- partitioned already is left as it is, with a notice, as in pgmq.
-- leading_partition is not used: maintenance keeps {premade_days} days made ahead.
-- Each lock is waited for 2 s at most; the SET clause ends with the function, so a
-- caller's own lock_timeout is back for the rest of its transaction.
CREATE FUNCTION {api}.convert_archive_partitioned(
    table_name text, partition_interval text DEFAULT '10000',
    retention_interval text DEFAULT '100000', leading_partition integer DEFAULT 10
) RETURNS void LANGUAGE plpgsql SET lock_timeout = '2s' AS $$
DECLARE
    a text := {api}._rel(table_name, 'a');
    cutoff date := (now() AT TIME ZONE 'UTC')::date + {cutoff_days};
    legacy text := {archive_prefix} || table_name || {partition_mark} || to_char(cutoff - 1, 'YYYYMMDD');
    chk text := quote_ident({archive_prefix} || table_name || {check_suffix});
    bound text := quote_literal(to_char(cutoff, 'YYYY-MM-DD') || ' 00:00:00+00');
    legacy_t text := format('%I.%I', {data}, legacy);
    a_id text := format('%I.%I', {data}, {archive_prefix} || table_name || '_id');
    legacy_id text := quote_ident({archive_prefix} || table_name || {index_suffix});
    a_id_name text := quote_ident({archive_prefix} || table_name || '_id');
BEGIN
    PERFORM {api}._check_intervals('convert_archive_partitioned', table_name, partition_interval, retention_interval);
    PERFORM 1 FROM {reg} WHERE name = table_name AND archive_retention IS NOT NULL;
    IF FOUND THEN
        RAISE NOTICE 'the archive of % is partitioned already', quote_literal(table_name);
        RETURN;
    END IF;
    UPDATE {reg} SET archive_retention = retention_interval::interval WHERE name = table_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'message queue % does not exist', quote_literal(table_name)
            USING ERRCODE = 'undefined_table';
    END IF;
{convert_steps}
    PERFORM {api}._make_archive_days(table_name, {cutoff_days});
END $$;

CREATE FUNCTION {api}.drop_queue(queue_name text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    sources text;
BEGIN
    PERFORM {api}.validate_queue_name(queue_name);
    SELECT string_agg(name, ', ' ORDER BY name) INTO sources FROM {reg} WHERE dead_letter = queue_name;
    IF sources IS NOT NULL THEN
        RAISE EXCEPTION 'message queue % is the dead-letter queue of %; drop those first',
            quote_literal(queue_name), sources;
    END IF;
    DELETE FROM {reg} WHERE name = queue_name;
    IF NOT FOUND THEN
        RAISE NOTICE 'queue % does not exist', quote_literal(queue_name);
        RETURN false;
    END IF;
    EXECUTE format('DROP TABLE IF EXISTS %s, %s', {api}._rel(queue_name, 'q'), {api}._rel(queue_name, 'a'));
    RETURN true;
END $$;
CREATE FUNCTION {api}.drop_queue(queue_name text, partitioned boolean) RETURNS boolean
LANGUAGE sql AS $$ SELECT {api}.drop_queue(queue_name) $$;

-- Archives are plain tables here (no extension owns them): nothing to detach.
CREATE FUNCTION {api}.detach_archive(queue_name text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {api}.validate_queue_name(queue_name);
END $$;

CREATE FUNCTION {api}.list_queues() RETURNS SETOF {api}.queue_record
LANGUAGE sql STABLE AS $$ SELECT queue_name, is_partitioned, is_unlogged, created_at FROM {api}.meta ORDER BY queue_name $$;

-- The message rules of mq.send(), at this door: a message is a JSON object or array
-- (never a scalar or null), headers an object or NULL; the text within
-- PGQUEUE['MAX_ARGS_BYTES'] bytes, nesting within PGQUEUE['MAX_JSON_DEPTH'] (both as
-- installed), and no number Python cannot read back (an integer of more than 4300
-- digits, a fraction beyond a float). jsonb itself refuses NUL and lone surrogates.
-- The walks are jsonpath (C), and run only once the size is known to be bounded.
CREATE FUNCTION {api}._check_document(doc jsonb, what text, is_headers boolean) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    size integer;
BEGIN
    IF doc IS NULL THEN
        IF is_headers THEN
            RETURN;
        END IF;
        RAISE EXCEPTION '% is NULL: a message must be a JSON object or array', what
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF is_headers AND jsonb_typeof(doc) <> 'object' THEN
        RAISE EXCEPTION '% must be a JSON object, got %', what, jsonb_typeof(doc)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jsonb_typeof(doc) NOT IN ('object', 'array') THEN
        RAISE EXCEPTION '% must be a JSON object or array, got %', what, jsonb_typeof(doc)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    size := octet_length(doc::text);
    IF size > {max_bytes} THEN
        RAISE EXCEPTION '% bytes of JSON (UTF-8) in %, more than the limit of % (PGQUEUE[''MAX_ARGS_BYTES''])',
            size, what, {max_bytes} USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF jsonb_path_exists(doc, 'strict $.**{{{max_depth}}} ? (@.type() == "object" || @.type() == "array")') THEN
        RAISE EXCEPTION '% is nested more than % levels deep (PGQUEUE[''MAX_JSON_DEPTH''])',
            what, {max_depth} USING ERRCODE = 'program_limit_exceeded';
    END IF;
    -- A number beyond a float is either an integer (Python reads up to 4300 digits)
    -- or written with a fraction, which Python would read as infinity: jsonpath cannot
    -- see how a number is written, so the text is asked, only when such a number exists.
    IF jsonb_path_exists(doc, 'strict $.** ? (@.type() == "number" && @.abs() > 1.7976931348623157e308)')
        AND (jsonb_path_exists(doc, 'strict $.** ? (@.type() == "number" && @.abs() >= 1e4300)')
             OR doc::text ~ '[0-9]{{200}}[0-9]{{109}}[.]') THEN
        RAISE EXCEPTION '% holds a number Python cannot read (an integer of more than 4300 digits, or a fraction too large for a float)',
            what USING ERRCODE = 'invalid_parameter_value';
    END IF;
END $$;

-- send: the NOTIFY wakes Python readers (read_with_poll, consumers) at commit;
-- PostgreSQL folds identical NOTIFYs of one transaction into one.
CREATE FUNCTION {api}.send(queue_name text, msg jsonb, headers jsonb, delay timestamptz)
RETURNS SETOF bigint LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {api}._check_document(msg, 'message', false);
    PERFORM {api}._check_document(headers, 'headers', true);
    RETURN QUERY EXECUTE format(
        'INSERT INTO %s (vt, message, headers) VALUES ($1, $2, $3) RETURNING msg_id',
        {api}._rel(queue_name, 'q')) USING delay, msg, headers;
    PERFORM pg_notify({channel_prefix} || queue_name, '');
END $$;
CREATE FUNCTION {api}.send(queue_name text, msg jsonb) RETURNS SETOF bigint
LANGUAGE sql AS $$ SELECT * FROM {api}.send(queue_name, msg, NULL, clock_timestamp()) $$;
CREATE FUNCTION {api}.send(queue_name text, msg jsonb, headers jsonb) RETURNS SETOF bigint
LANGUAGE sql AS $$ SELECT * FROM {api}.send(queue_name, msg, headers, clock_timestamp()) $$;
CREATE FUNCTION {api}.send(queue_name text, msg jsonb, delay integer) RETURNS SETOF bigint
LANGUAGE sql AS $$
    SELECT * FROM {api}.send(queue_name, msg, NULL, clock_timestamp() + make_interval(secs => delay))
$$;
CREATE FUNCTION {api}.send(queue_name text, msg jsonb, delay timestamptz) RETURNS SETOF bigint
LANGUAGE sql AS $$ SELECT * FROM {api}.send(queue_name, msg, NULL, delay) $$;
CREATE FUNCTION {api}.send(queue_name text, msg jsonb, headers jsonb, delay integer)
RETURNS SETOF bigint LANGUAGE sql AS $$
    SELECT * FROM {api}.send(queue_name, msg, headers, clock_timestamp() + make_interval(secs => delay))
$$;

CREATE FUNCTION {api}.send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay timestamptz)
RETURNS SETOF bigint LANGUAGE plpgsql AS $$
DECLARE
    n integer := coalesce(cardinality(msgs), 0);
BEGIN
    IF n > {max_batch} THEN
        RAISE EXCEPTION 'the number of messages must be at most {max_batch}, got %', n
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF headers IS NOT NULL AND cardinality(headers) <> n THEN
        RAISE EXCEPTION '% headers for % messages', cardinality(headers), n
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR i IN 1..n LOOP
        PERFORM {api}._check_document(msgs[i], format('msgs[%s]', i), false);
        IF headers IS NOT NULL THEN
            PERFORM {api}._check_document(headers[i], format('headers[%s]', i), true);
        END IF;
    END LOOP;
    RETURN QUERY EXECUTE format(
        'INSERT INTO %s (vt, message, headers)
         SELECT $2, m, h FROM unnest($1, $3) WITH ORDINALITY AS t(m, h, n) ORDER BY n
         RETURNING msg_id',
        {api}._rel(queue_name, 'q')) USING msgs, delay, headers;
    PERFORM pg_notify({channel_prefix} || queue_name, '');
END $$;
CREATE FUNCTION {api}.send_batch(queue_name text, msgs jsonb[]) RETURNS SETOF bigint
LANGUAGE sql AS $$ SELECT * FROM {api}.send_batch(queue_name, msgs, NULL, clock_timestamp()) $$;
CREATE FUNCTION {api}.send_batch(queue_name text, msgs jsonb[], headers jsonb[])
RETURNS SETOF bigint LANGUAGE sql AS $$
    SELECT * FROM {api}.send_batch(queue_name, msgs, headers, clock_timestamp())
$$;
CREATE FUNCTION {api}.send_batch(queue_name text, msgs jsonb[], delay integer)
RETURNS SETOF bigint LANGUAGE sql AS $$
    SELECT * FROM {api}.send_batch(queue_name, msgs, NULL, clock_timestamp() + make_interval(secs => delay))
$$;
CREATE FUNCTION {api}.send_batch(queue_name text, msgs jsonb[], delay timestamptz)
RETURNS SETOF bigint LANGUAGE sql AS $$ SELECT * FROM {api}.send_batch(queue_name, msgs, NULL, delay) $$;
CREATE FUNCTION {api}.send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay integer)
RETURNS SETOF bigint LANGUAGE sql AS $$
    SELECT * FROM {api}.send_batch(queue_name, msgs, headers, clock_timestamp() + make_interval(secs => delay))
$$;

-- The scan floor of this session's reads of a queue (mq/sql.py, _FLOOR; the rules are
-- the worker's, scan_floor.py, whose constants these are). Under a held-back xmin
-- horizon a read from the queue's head walks past every message archived since the
-- pin began; a floored read looks only at the messages that became visible in the
-- last seconds. At least every {full_every} s (less often while full reads are slow,
-- at most every {full_every_max} s) a full read walks from the head; a full read that
-- came back short is the witness that nothing older waits, and the floor sits
-- {margin} s below it. The state is this session's (a custom setting,
-- pgqueue_floor.q<md5 of the name>: the witness's time and the next full read's,
-- epoch seconds): a client looping on read() on one connection gets the floor; a
-- read in a transaction that began more than a second ago always reads in full.
CREATE FUNCTION {api}._floor(queue_name text) RETURNS float8
LANGUAGE plpgsql AS $$
DECLARE
    state text[] := string_to_array(current_setting('pgqueue_floor.q' || md5(queue_name), true), ' ');
BEGIN
    IF cardinality(state) IS DISTINCT FROM 2 OR state[1] = ''
       OR extract(epoch FROM clock_timestamp()) >= state[2]::float8
       OR clock_timestamp() - now() > interval '1 second' THEN
        RETURN NULL;
    END IF;
    RETURN extract(epoch FROM now()) - state[1]::float8 + {margin};
END $$;
-- After a read that began at started (floor: its age, NULL for a full read) and
-- returned fewer rows than asked (short): the state for the next.
CREATE FUNCTION {api}._floor_record(queue_name text, started timestamptz, floor float8, short boolean)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    setting text := 'pgqueue_floor.q' || md5(queue_name);
    state text[] := string_to_array(current_setting(setting, true), ' ');
    witness float8 := extract(epoch FROM now());  -- no snapshot of this read is older
    spacing float8;
BEGIN
    IF floor IS NOT NULL THEN
        IF short AND cardinality(state) = 2 AND state[1] <> ''
           AND witness - {trail} > state[1]::float8 THEN
            PERFORM set_config(setting, (witness - {trail})::text || ' ' || state[2], false);
        END IF;
        RETURN;
    END IF;
    spacing := LEAST({full_every_max}, extract(epoch FROM clock_timestamp() - started) / {full_share});
    PERFORM set_config(setting, CASE WHEN short THEN witness::text ELSE '' END || ' '
        || (extract(epoch FROM started) + GREATEST({full_every}, spacing))::text, false);
END $$;

-- read: the statement of mq.read(), dead letters included ($1 qty, $2 vt,
-- $3 conditional, $4 max_reads, $5 queue name, $6 and $7 the scan floor's age and
-- candidates, NULL for a full read). A message already read max_reads times goes to
-- the dead-letter queue (or the archive) instead of being returned. A conditional
-- read neither uses nor moves the floor.
CREATE FUNCTION {api}.read(queue_name text, vt integer, qty integer, conditional jsonb DEFAULT '{{}}')
RETURNS SETOF {api}.message_record LANGUAGE plpgsql AS $$
DECLARE
    q text := {api}._rel(queue_name, 'q');
    cfg record;
    moved text := '';
    started timestamptz := clock_timestamp();
    floored boolean := conditional = '{{}}'::jsonb;
    floor float8;
    n bigint;
BEGIN
    SELECT max_reads, dead_letter INTO cfg FROM {reg} WHERE name = queue_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'message queue % does not exist', quote_literal(queue_name)
            USING ERRCODE = 'undefined_table';
    END IF;
    IF cfg.max_reads IS NOT NULL THEN
        moved := format(
            ', dead AS (
                DELETE FROM %1$s m WHERE m.msg_id = ANY(ARRAY(SELECT msg_id FROM picked WHERE dead))
                RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message, m.headers, m.last_read_at
            ), moved AS (%2$s)',
            q,
            CASE WHEN cfg.dead_letter IS NULL THEN format(
                'INSERT INTO %s ({message_columns}) SELECT {message_columns} FROM dead',
                {api}._rel(queue_name, 'a'))
            ELSE format(
                $q$INSERT INTO %s (vt, message, headers)
                 SELECT clock_timestamp(), message,
                   CASE WHEN headers IS NULL OR jsonb_typeof(headers) = 'object'
                   THEN COALESCE(headers, '{{}}') || jsonb_build_object('x-pgqueue-dead-letter',
                        jsonb_build_object('queue', $5, 'msg_id', msg_id, 'read_ct', read_ct,
                                           'enqueued_at', enqueued_at))
                   ELSE headers END
                 FROM dead ORDER BY msg_id$q$,
                {api}._rel(cfg.dead_letter, 'q'))
            END);
    END IF;
    IF floored THEN
        floor := {api}._floor(queue_name);
    END IF;
    RETURN QUERY EXECUTE format(
        'WITH picked AS MATERIALIZED (
            SELECT msg_id, COALESCE(read_ct >= $4, false) AS dead FROM %1$s
            WHERE vt <= clock_timestamp() AND ($3 = ''{{}}''::jsonb OR message @> $3)
              AND ($6::float8 IS NULL OR {floor_condition})
            ORDER BY msg_id LIMIT $1 FOR UPDATE SKIP LOCKED
        )%2$s
        UPDATE %1$s m
        SET vt = clock_timestamp() + make_interval(secs => $2), read_ct = m.read_ct + 1,
            last_read_at = clock_timestamp()
        WHERE m.msg_id = ANY(ARRAY(SELECT msg_id FROM picked WHERE NOT dead))
        RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message, m.headers, m.last_read_at',
        q, moved) USING qty, vt, conditional, cfg.max_reads, queue_name, floor,
                        GREATEST({floor_candidates}, 4 * qty);
    IF floored THEN
        GET DIAGNOSTICS n = ROW_COUNT;
        PERFORM {api}._floor_record(queue_name, started, floor, n < qty);
    END IF;
END $$;

-- A function cannot LISTEN, so the SQL read_with_poll sleeps between reads like
-- pgmq's (Python readers are woken by NOTIFY instead). One loop for read_with_poll and
-- the grouped reads' _with_poll forms (kind: 'read' or a grouped read's name).
CREATE FUNCTION {api}._poll(
    queue_name text, vt integer, qty integer, max_poll_seconds integer,
    poll_interval_ms integer, conditional jsonb, kind text
) RETURNS SETOF {api}.message_record LANGUAGE plpgsql AS $$
DECLARE
    stop_at timestamptz := clock_timestamp() + make_interval(secs => max_poll_seconds);
BEGIN
    LOOP
        IF kind = 'read' THEN
            RETURN QUERY SELECT * FROM {api}.read(queue_name, vt, qty, conditional);
        ELSE
            RETURN QUERY SELECT * FROM {api}._read_grouped(queue_name, vt, qty, kind);
        END IF;
        IF FOUND OR clock_timestamp() >= stop_at THEN
            RETURN;
        END IF;
        PERFORM pg_sleep(poll_interval_ms / 1000.0);
    END LOOP;
END $$;
CREATE FUNCTION {api}.read_with_poll(
    queue_name text, vt integer, qty integer, max_poll_seconds integer DEFAULT 5,
    poll_interval_ms integer DEFAULT 100, conditional jsonb DEFAULT '{{}}'
) RETURNS SETOF {api}.message_record LANGUAGE sql AS $$
    SELECT * FROM {api}._poll(queue_name, vt, qty, max_poll_seconds, poll_interval_ms, conditional, 'read')
$$;

CREATE FUNCTION {api}.pop(queue_name text, qty integer DEFAULT 1)
RETURNS SETOF {api}.message_record LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY EXECUTE format(
        'WITH picked AS MATERIALIZED (
            SELECT msg_id FROM %1$s WHERE vt <= clock_timestamp()
            ORDER BY msg_id LIMIT $1 FOR UPDATE SKIP LOCKED
        )
        DELETE FROM %1$s m WHERE m.msg_id = ANY(ARRAY(SELECT msg_id FROM picked))
        RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message, m.headers, m.last_read_at',
        {api}._rel(queue_name, 'q')) USING qty;
END $$;

-- set_vt: the visibility timeout as seconds from now or as an instant (pgmq 1.6+),
-- for one message or an array of them. All four share one UPDATE.
CREATE FUNCTION {api}.set_vt(queue_name text, msg_ids bigint[], vt timestamptz)
RETURNS SETOF {api}.message_record LANGUAGE plpgsql AS $$
BEGIN
    IF vt IS NULL THEN
        RAISE EXCEPTION 'vt is NULL: give seconds from now or a timestamp'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY EXECUTE format(
        'UPDATE %s SET vt = $1 WHERE msg_id = ANY($2) RETURNING {message_columns}',
        {api}._rel(queue_name, 'q')) USING vt, msg_ids;
END $$;
CREATE FUNCTION {api}.set_vt(queue_name text, msg_ids bigint[], vt integer)
RETURNS SETOF {api}.message_record LANGUAGE sql AS $$
    SELECT * FROM {api}.set_vt(queue_name, msg_ids, clock_timestamp() + make_interval(secs => vt))
$$;
CREATE FUNCTION {api}.set_vt(queue_name text, msg_id bigint, vt timestamptz)
RETURNS SETOF {api}.message_record LANGUAGE sql AS $$
    SELECT * FROM {api}.set_vt(queue_name, ARRAY[msg_id], vt)
$$;
CREATE FUNCTION {api}.set_vt(queue_name text, msg_id bigint, vt integer)
RETURNS SETOF {api}.message_record LANGUAGE sql AS $$
    SELECT * FROM {api}.set_vt(queue_name, ARRAY[msg_id], clock_timestamp() + make_interval(secs => vt))
$$;
-- A client that sends its parameters untyped (pgmq-js sends every value as text) would
-- find the overloads above ambiguous; PostgreSQL prefers a text parameter for an
-- untyped value, so this one takes it and reads seconds or an instant.
CREATE FUNCTION {api}.set_vt(queue_name text, msg_id text, vt text)
RETURNS SETOF {api}.message_record LANGUAGE plpgsql AS $$
BEGIN
    IF msg_id !~ '^[0-9]{{1,19}}$' THEN
        RAISE EXCEPTION 'msg_id must be a message id, got %', quote_nullable(msg_id)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF vt ~ '^[0-9]{{1,9}}$' THEN
        RETURN QUERY SELECT * FROM {api}.set_vt(queue_name, ARRAY[msg_id::bigint], clock_timestamp() + make_interval(secs => vt::integer));
        RETURN;
    END IF;
    BEGIN
        RETURN QUERY SELECT * FROM {api}.set_vt(queue_name, ARRAY[msg_id::bigint], vt::timestamptz);
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
        RAISE EXCEPTION 'vt must be seconds from now or a timestamp, got %', quote_nullable(vt)
            USING ERRCODE = 'invalid_parameter_value';
    END;
END $$;

CREATE FUNCTION {api}.archive(queue_name text, msg_ids bigint[]) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY EXECUTE format(
        'WITH gone AS (
            DELETE FROM %s WHERE msg_id = ANY($1) RETURNING {message_columns}
        )
        INSERT INTO %s ({message_columns}) SELECT {message_columns} FROM gone
        RETURNING msg_id',
        {api}._rel(queue_name, 'q'), {api}._rel(queue_name, 'a')) USING msg_ids;
END $$;
CREATE FUNCTION {api}.archive(queue_name text, msg_id bigint) RETURNS boolean
LANGUAGE sql AS $$ SELECT EXISTS (SELECT 1 FROM {api}.archive(queue_name, ARRAY[msg_id])) $$;

CREATE FUNCTION {api}.delete(queue_name text, msg_ids bigint[]) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY EXECUTE format(
        'DELETE FROM %s WHERE msg_id = ANY($1) RETURNING msg_id',
        {api}._rel(queue_name, 'q')) USING msg_ids;
END $$;
CREATE FUNCTION {api}.delete(queue_name text, msg_id bigint) RETURNS boolean
LANGUAGE sql AS $$ SELECT EXISTS (SELECT 1 FROM {api}.delete(queue_name, ARRAY[msg_id])) $$;

-- DELETE rather than TRUNCATE, as mq.purge(): no ACCESS EXCLUSIVE lock.
CREATE FUNCTION {api}.purge_queue(queue_name text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    purged bigint;
BEGIN
    EXECUTE format('WITH gone AS (DELETE FROM %s RETURNING 1) SELECT count(*) FROM gone',
        {api}._rel(queue_name, 'q')) INTO purged;
    RETURN purged;
END $$;

CREATE FUNCTION {api}.metrics(queue_name text) RETURNS {api}.metrics_result
LANGUAGE plpgsql AS $$
DECLARE
    result {api}.metrics_result;
BEGIN
    EXECUTE format(
        'SELECT $1, count(*),
                EXTRACT(epoch FROM clock_timestamp() - max(enqueued_at))::int,
                EXTRACT(epoch FROM clock_timestamp() - min(enqueued_at))::int,
                (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM %s),
                clock_timestamp(),
                count(*) FILTER (WHERE vt <= clock_timestamp()),
                NULL::bigint
         FROM %s',
        {api}._rel(queue_name, 's'), {api}._rel(queue_name, 'q')) INTO result USING queue_name;
    RETURN result;
END $$;

CREATE FUNCTION {api}.metrics_all() RETURNS SETOF {api}.metrics_result
LANGUAGE plpgsql AS $$
DECLARE
    queue text;
BEGIN
    FOR queue IN SELECT name FROM {reg} ORDER BY name LOOP
        RETURN NEXT {api}.metrics(queue);
    END LOOP;
END $$;
"""

# Fenced deletes, beyond pgmq: delete or archive a message only while the read that
# handed it out (its read_ct) is still the current one. With pgmq's delete by msg_id
# alone, a consumer whose visibility timeout lapsed deletes the message another
# consumer has read since; with these, that late call matches nothing. {settle} is
# the text of the worker's own fenced statement (mq.sql "settle", via for_plpgsql),
# so the two doors run one rule, not two copies of it.
_FENCED_DDL = """
CREATE FUNCTION {api}._settle(queue_name text, msg_ids bigint[], read_cts integer[], keep boolean)
RETURNS SETOF bigint LANGUAGE plpgsql AS $$
DECLARE
    n integer := coalesce(cardinality(msg_ids), 0);
BEGIN
    IF n <> coalesce(cardinality(read_cts), 0) THEN
        RAISE EXCEPTION '% read counts for % message ids', coalesce(cardinality(read_cts), 0), n
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF n = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format({settle}, {api}._rel(queue_name, 'q'), {api}._rel(queue_name, 'a'))
    USING msg_ids, read_cts,
          array_fill(CASE WHEN keep THEN 'archive' ELSE 'delete' END, ARRAY[n]),
          array_fill(0::float8, ARRAY[n]);
END $$;
CREATE FUNCTION {api}.delete(queue_name text, msg_id bigint, read_ct integer) RETURNS boolean
LANGUAGE sql AS $$
    SELECT EXISTS (SELECT 1 FROM {api}._settle(queue_name, ARRAY[msg_id], ARRAY[read_ct], false))
$$;
CREATE FUNCTION {api}.delete(queue_name text, msg_ids bigint[], read_cts integer[])
RETURNS SETOF bigint LANGUAGE sql AS $$ SELECT * FROM {api}._settle(queue_name, msg_ids, read_cts, false) $$;
CREATE FUNCTION {api}.archive(queue_name text, msg_id bigint, read_ct integer) RETURNS boolean
LANGUAGE sql AS $$
    SELECT EXISTS (SELECT 1 FROM {api}._settle(queue_name, ARRAY[msg_id], ARRAY[read_ct], true))
$$;
CREATE FUNCTION {api}.archive(queue_name text, msg_ids bigint[], read_cts integer[])
RETURNS SETOF bigint LANGUAGE sql AS $$ SELECT * FROM {api}._settle(queue_name, msg_ids, read_cts, true) $$;
"""

# pgmq's insert notification: a NOTIFY on "pgmq.q_<queue>.INSERT" (the channel pgmq's
# clients LISTEN on, whatever the schema), at most once per throttle interval. One
# trigger per INSERT statement, not per row as in pgmq, so a batch costs one check.
# An interval of 0 notifies without touching the throttle row (PostgreSQL folds the
# NOTIFYs of one transaction); otherwise the row is claimed with SKIP LOCKED, so
# concurrent senders never queue behind each other's uncommitted notification. The
# table is logged: the configuration survives a crash. A reinstall keeps it
# (sql_api.install re-enables what was enabled).
_NOTIFY_DDL = """
CREATE TABLE {api}.notify_insert_throttle (
    queue_name text PRIMARY KEY,
    throttle_interval_ms integer NOT NULL CHECK (throttle_interval_ms >= 0),
    last_notified_at timestamptz NOT NULL DEFAULT to_timestamp(0)
);

CREATE FUNCTION {api}._notify_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    queue text := TG_ARGV[0];
    interval_ms integer;
BEGIN
    SELECT t.throttle_interval_ms INTO interval_ms FROM {api}.notify_insert_throttle t
    WHERE t.queue_name = queue;
    IF interval_ms IS NULL THEN
        RETURN NULL;
    END IF;
    IF interval_ms > 0 THEN
        UPDATE {api}.notify_insert_throttle t SET last_notified_at = clock_timestamp()
        WHERE t.queue_name IN (
            SELECT u.queue_name FROM {api}.notify_insert_throttle u
            WHERE u.queue_name = queue
              AND clock_timestamp() - u.last_notified_at >= make_interval(secs => interval_ms / 1000.0)
            FOR UPDATE SKIP LOCKED);
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    END IF;
    PERFORM pg_notify('pgmq.q_' || queue || '.INSERT', NULL);
    RETURN NULL;
END $$;

-- The arguments of enable_notify_insert and update_notify_insert.
CREATE FUNCTION {api}._check_notify(queue_name text, throttle_interval_ms integer) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF throttle_interval_ms IS NULL OR throttle_interval_ms < 0 THEN
        RAISE EXCEPTION 'throttle_interval_ms must be non-negative, got %', throttle_interval_ms
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM {api}.validate_queue_name(queue_name);
    IF NOT EXISTS (SELECT 1 FROM {reg} r WHERE r.name = queue_name) THEN
        RAISE EXCEPTION 'message queue % does not exist', quote_literal(queue_name)
            USING ERRCODE = 'undefined_table';
    END IF;
END $$;

CREATE FUNCTION {api}.disable_notify_insert(queue_name text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {api}.validate_queue_name(queue_name);
    IF to_regclass({api}._rel(queue_name, 'q')) IS NOT NULL THEN
        EXECUTE format('DROP TRIGGER IF EXISTS pgqueue_notify_insert ON %s', {api}._rel(queue_name, 'q'));
    END IF;
    DELETE FROM {api}.notify_insert_throttle t WHERE t.queue_name = disable_notify_insert.queue_name;
END $$;

CREATE FUNCTION {api}.enable_notify_insert(queue_name text, throttle_interval_ms integer DEFAULT 250)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {api}._check_notify(queue_name, throttle_interval_ms);
    PERFORM {api}.disable_notify_insert(queue_name);
    INSERT INTO {api}.notify_insert_throttle (queue_name, throttle_interval_ms)
    VALUES (queue_name, throttle_interval_ms);
    EXECUTE format(
        'CREATE TRIGGER pgqueue_notify_insert AFTER INSERT ON %s
         FOR EACH STATEMENT EXECUTE FUNCTION %I._notify_insert(%L)',
        {api}._rel(queue_name, 'q'), {api_name}, queue_name);
END $$;

CREATE FUNCTION {api}.update_notify_insert(queue_name text, throttle_interval_ms integer)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {api}._check_notify(queue_name, throttle_interval_ms);
    UPDATE {api}.notify_insert_throttle t
    SET throttle_interval_ms = update_notify_insert.throttle_interval_ms, last_notified_at = to_timestamp(0)
    WHERE t.queue_name = update_notify_insert.queue_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'message queue % does not have insert notification enabled; call enable_notify_insert() first',
            quote_literal(queue_name) USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
END $$;

-- Only queues whose trigger still exists: mq.drop() (the Python door) drops the table,
-- and its trigger with it, without knowing about this schema.
CREATE FUNCTION {api}.list_notify_insert_throttles()
RETURNS TABLE (queue_name text, throttle_interval_ms integer, last_notified_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT t.queue_name, t.throttle_interval_ms, t.last_notified_at
    FROM {api}.notify_insert_throttle t
    WHERE EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgname = 'pgqueue_notify_insert'
                  AND g.tgrelid = to_regclass({api}._rel(t.queue_name, 'q')))
    ORDER BY t.queue_name
$$;
"""

# FIFO group reads: the statements of mq.grouped ({read_grouped}, {read_grouped_rr},
# {read_grouped_head}, via for_plpgsql: $1 and $3 qty, $2 the messages looked at per
# group, $4 vt), so both doors hand out a group's messages by one rule. A queue with
# max_reads is refused, as in Python.
# The FIFO index is mq.create_fifo_index's statement ({create_fifo_index}).
_GROUPED_DDL = """
CREATE FUNCTION {api}._read_grouped(queue_name text, vt integer, qty integer, kind text)
RETURNS SETOF {api}.message_record LANGUAGE plpgsql AS $$
DECLARE
    cfg record;
BEGIN
    PERFORM {api}.validate_queue_name(queue_name);
    SELECT max_reads INTO cfg FROM {reg} WHERE name = queue_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'message queue % does not exist', quote_literal(queue_name)
            USING ERRCODE = 'undefined_table';
    END IF;
    IF cfg.max_reads IS NOT NULL THEN
        RAISE EXCEPTION '% is not offered on queue %: it has max_reads (dead letters by read count); read it with read() or use a queue without max_reads',
            kind, quote_literal(queue_name) USING ERRCODE = 'feature_not_supported';
    END IF;
    IF qty IS NULL OR qty < 1 OR vt IS NULL OR vt < 0 THEN
        RAISE EXCEPTION 'qty must be at least 1 and vt at least 0, got qty % and vt %', qty, vt
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY EXECUTE format(CASE kind
        WHEN 'read_grouped' THEN {read_grouped}
        WHEN 'read_grouped_rr' THEN {read_grouped_rr}
        ELSE {read_grouped_head} END, {api}._rel(queue_name, 'q'))
        USING qty, CASE kind WHEN 'read_grouped_head' THEN 1 ELSE qty END, qty, vt;
END $$;

CREATE FUNCTION {api}.create_fifo_index(queue_name text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {api}.validate_queue_name(queue_name);
    IF NOT EXISTS (SELECT 1 FROM {reg} r WHERE r.name = queue_name) THEN
        RAISE EXCEPTION 'message queue % does not exist', quote_literal(queue_name)
            USING ERRCODE = 'undefined_table';
    END IF;
    EXECUTE format({create_fifo_index}, {api}._rel(queue_name, 'q'), '',
                   format('%I', {group_prefix} || queue_name));
END $$;

CREATE FUNCTION {api}.create_fifo_indexes_all() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    queue text;
BEGIN
    FOR queue IN SELECT name FROM {reg} ORDER BY name LOOP
        PERFORM {api}.create_fifo_index(queue);
    END LOOP;
END $$;
""" + "".join(  # noqa: S608 - module constants
    f"""
CREATE FUNCTION {{api}}.{kind}(queue_name text, vt integer, qty integer)
RETURNS SETOF {{api}}.message_record LANGUAGE sql AS $$
    SELECT * FROM {{api}}._read_grouped(queue_name, vt, qty, '{kind}')
$$;
CREATE FUNCTION {{api}}.{kind}_with_poll(
    queue_name text, vt integer, qty integer, max_poll_seconds integer DEFAULT 5,
    poll_interval_ms integer DEFAULT 100
) RETURNS SETOF {{api}}.message_record LANGUAGE sql AS $$
    SELECT * FROM {{api}}._poll(
        queue_name, vt, qty, max_poll_seconds, poll_interval_ms, NULL, '{kind}')
$$;
"""  # noqa: S608 - module constants
    for kind in GROUPED_KINDS
)

# Topic routing: the rules of routing keys and patterns are mq.validation's lists
# ({key_rules}, {pattern_rules}: generated from them by _rules_plpgsql), and the
# statements are mq.sql's ({bind}, {unbind}, {route}, {test_routing}, {list}), over
# the one bindings table the Python door uses. send_topic sends with this API's own
# send, so each copy is checked and wakes its readers like any other send.
_TOPIC_DDL = """
CREATE FUNCTION {api}._check_topic(value text, what text, is_pattern boolean) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF value IS NULL OR value = '' THEN
        RAISE EXCEPTION '% cannot be empty', what USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF length(value) > {max_topic} THEN
        RAISE EXCEPTION '% is too long, maximum length is {max_topic} characters, got %',
            what, length(value) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF is_pattern THEN
{pattern_rules}
    ELSE
{key_rules}
    END IF;
    RETURN true;
END $$;
CREATE FUNCTION {api}.validate_routing_key(routing_key text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$ SELECT {api}._check_topic(routing_key, 'routing_key', false) $$;
CREATE FUNCTION {api}.validate_topic_pattern(pattern text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$ SELECT {api}._check_topic(pattern, 'pattern', true) $$;

CREATE FUNCTION {api}.bind_topic(pattern text, queue_name text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {api}.validate_topic_pattern(pattern);
    PERFORM {api}.validate_queue_name(queue_name);
    IF queue_name IS NULL OR NOT EXISTS (SELECT 1 FROM {reg} r WHERE r.name = queue_name) THEN
        RAISE EXCEPTION 'message queue % does not exist', quote_nullable(queue_name)
            USING ERRCODE = 'undefined_table';
    END IF;
    EXECUTE format({bind}) USING pattern, queue_name;
END $$;

CREATE FUNCTION {api}.unbind_topic(pattern text, queue_name text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    gone text;
BEGIN
    PERFORM {api}.validate_topic_pattern(pattern);
    PERFORM {api}.validate_queue_name(queue_name);
    EXECUTE format({unbind}) INTO gone USING pattern, queue_name;
    RETURN gone IS NOT NULL;
END $$;

CREATE FUNCTION {api}.test_routing(routing_key text)
RETURNS TABLE (pattern text, queue_name text, compiled_regex text)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    PERFORM {api}.validate_routing_key(routing_key);
    RETURN QUERY EXECUTE format({test_routing}) USING routing_key;
END $$;

CREATE FUNCTION {api}._list_topic_bindings(p_queue text)
RETURNS TABLE (b_pattern text, b_queue_name text, b_bound_at timestamptz, b_compiled_regex text)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY EXECUTE format({list}) USING p_queue, p_queue;
END $$;
-- SQL, not plpgsql: the parameter shares the name of an output column, as in pgmq.
CREATE FUNCTION {api}.list_topic_bindings()
RETURNS TABLE (pattern text, queue_name text, bound_at timestamptz, compiled_regex text)
LANGUAGE sql STABLE AS $$ SELECT * FROM {api}._list_topic_bindings(NULL) $$;
CREATE FUNCTION {api}.list_topic_bindings(queue_name text)
RETURNS TABLE (pattern text, queue_name text, bound_at timestamptz, compiled_regex text)
LANGUAGE sql STABLE AS $$ SELECT * FROM {api}._list_topic_bindings(queue_name) $$;

CREATE FUNCTION {api}.send_topic(routing_key text, msg jsonb, headers jsonb, delay integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    queue text;
    sent integer := 0;
BEGIN
    PERFORM {api}.validate_routing_key(routing_key);
    PERFORM {api}._check_document(msg, 'message', false);
    PERFORM {api}._check_document(headers, 'headers', true);
    IF delay IS NULL OR delay < 0 THEN
        RAISE EXCEPTION 'delay must be a number of seconds, at least 0, got %', delay
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR queue IN EXECUTE format({route}) USING routing_key LOOP
        PERFORM {api}.send(queue, msg, headers, delay);
        sent := sent + 1;
    END LOOP;
    RETURN sent;
END $$;
CREATE FUNCTION {api}.send_topic(routing_key text, msg jsonb) RETURNS integer
LANGUAGE sql AS $$ SELECT {api}.send_topic(routing_key, msg, NULL, 0) $$;
CREATE FUNCTION {api}.send_topic(routing_key text, msg jsonb, delay integer) RETURNS integer
LANGUAGE sql AS $$ SELECT {api}.send_topic(routing_key, msg, NULL, delay) $$;
-- Not in pgmq's SQL, but the pgmq client (1.1.4) calls it for headers without a delay.
CREATE FUNCTION {api}.send_topic(routing_key text, msg jsonb, headers jsonb) RETURNS integer
LANGUAGE sql AS $$ SELECT {api}.send_topic(routing_key, msg, headers, 0) $$;

CREATE FUNCTION {api}.send_batch_topic(
    routing_key text, msgs jsonb[], headers jsonb[], delay timestamptz
) RETURNS TABLE (queue_name text, msg_id bigint) LANGUAGE plpgsql AS $$
DECLARE
    queue text;
BEGIN
    PERFORM {api}.validate_routing_key(routing_key);
    IF delay IS NULL THEN
        RAISE EXCEPTION 'delay is NULL: give seconds from now or a timestamp'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR i IN 1..coalesce(cardinality(msgs), 0) LOOP
        PERFORM {api}._check_document(msgs[i], format('msgs[%s]', i), false);
    END LOOP;
    FOR queue IN EXECUTE format({route}) USING routing_key LOOP
        RETURN QUERY SELECT queue, s.id FROM {api}.send_batch(queue, msgs, headers, delay) AS s(id);
    END LOOP;
END $$;
""" + "".join(  # noqa: S608 - module constants
    f"""CREATE FUNCTION {{api}}.send_batch_topic(routing_key text, msgs jsonb[]{params})
RETURNS TABLE (queue_name text, msg_id bigint) LANGUAGE sql AS $$
    SELECT * FROM {{api}}.send_batch_topic(routing_key, msgs, {args})
$$;
"""  # noqa: S608 - module constants
    for params, args in [
        ("", "NULL, clock_timestamp()"),
        (", headers jsonb[]", "headers, clock_timestamp()"),
        (", delay integer", "NULL, clock_timestamp() + make_interval(secs => delay)"),
        (", delay timestamptz", "NULL, delay"),
        (
            ", headers jsonb[], delay integer",
            "headers, clock_timestamp() + make_interval(secs => delay)",
        ),
    ]
)


def _rules_plpgsql(rules: list[tuple[str, str]]) -> str:
    """The plpgsql checks of a list of ``mq.validation`` rules (expression, problem)."""
    return "\n".join(
        f"        IF value ~ {pgsql.Literal(expression).as_string(None)} THEN\n"
        f"            RAISE EXCEPTION '%', format('%s %s: %L', what, "
        f"{pgsql.Literal(problem).as_string(None)}, value)\n"
        "                USING ERRCODE = 'invalid_parameter_value';\n"
        "        END IF;"
        for expression, problem in rules
    )


def _embedded(kind: str, **ids: Any) -> pgsql.Composable:
    """Statement ``kind`` of mq.sql as a literal inside this DDL (braces doubled for
    the DDL's own format())."""
    return pgsql.SQL(for_plpgsql(kind, **ids).replace("{", "{{").replace("}", "}}"))


def _partition_statement(template: str, **placeholders: str) -> pgsql.Composable:
    """A day partition's statement (``sql/history.py``, the one maintenance runs) as a
    ``format()`` string literal inside this DDL, its parts as ``%n$s``."""
    text = pgsql.SQL(template).format(**{k: pgsql.SQL(v) for k, v in placeholders.items()})
    literal = pgsql.Literal(text.as_string(None)).as_string(None)
    return pgsql.SQL(literal.replace("{", "{{").replace("}", "}}"))


#: The conversion's statements (mq/sql.py, CONVERT_ARCHIVE) as format() arguments, in
#: the order of the variables of convert_archive_partitioned.
_CONVERT_ARGS = "a, chk, bound, quote_ident(legacy), legacy_t, a_id, legacy_id, a_id_name"
_CONVERT_PLACEHOLDERS = {
    "a": "%1$s",
    "check": "%2$s",
    "cutoff": "%3$s",
    "legacy": "%4$s",
    "legacy_table": "%5$s",
    "a_id": "%6$s",
    "legacy_id": "%7$s",
    "a_id_name": "%8$s",
}


def _convert_statements() -> pgsql.Composable:
    """The EXECUTEs of convert_archive_partitioned, one per statement of the Python
    conversion's steps, in their order."""
    lines = []
    for step in ("undo", "check", "validate", "swap"):
        templates = CONVERT_ARCHIVE[step]
        for template in [templates] if isinstance(templates, str) else templates:
            statement = _partition_statement(template, **_CONVERT_PLACEHOLDERS)
            lines.append(
                pgsql.SQL("    EXECUTE format({}, " + _CONVERT_ARGS + ");").format(statement)
            )
    return pgsql.SQL("\n").join(lines)


_DDL += _FENCED_DDL + _NOTIFY_DDL + _GROUPED_DDL + _TOPIC_DDL


def _schema_state(cursor: Any, schema: str) -> tuple[bool, bool, bool, bool]:
    """(exists, is ours, holds the pgmq extension, has other objects)."""
    cursor.execute(
        """/* pgqueue:mq_sql_api_schema */
        SELECT n.oid IS NOT NULL,
               pg_catalog.obj_description(n.oid, 'pg_namespace') = %s,
               EXISTS (SELECT 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'pgmq'
                       AND e.extnamespace = n.oid),
               EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid)
               OR EXISTS (SELECT 1 FROM pg_catalog.pg_proc p WHERE p.pronamespace = n.oid)
        FROM (SELECT 1) one LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = %s""",
        [MARKER, schema],
    )
    exists, ours, extension, objects = cursor.fetchone()
    return bool(exists), bool(ours), bool(extension), bool(objects)


def _data_schema(cursor: Any) -> str:
    cursor.execute(
        "SELECT relnamespace::regnamespace::text FROM pg_catalog.pg_class"
        " WHERE oid = pg_catalog.to_regclass(%s)",
        [REGISTRY],
    )
    row = cursor.fetchone()
    if row is None:
        raise SqlApiError(f"table {REGISTRY} not found: run `manage.py migrate` first")
    # regnamespace::text is quoted when needed; we want the bare name.
    cursor.execute(
        "SELECT nspname FROM pg_catalog.pg_namespace WHERE oid = %s::regnamespace", [row[0]]
    )
    return str(cursor.fetchone()[0])


def ddl(schema: str, data_schema: str) -> str:
    """The install script for ``schema`` over tables in ``data_schema``.

    The message limits (``PGQUEUE['MAX_ARGS_BYTES']``, ``['MAX_JSON_DEPTH']``) are
    written in as they are now: reinstall after changing them. Every function gets
    ``SEARCH_PATH``, from this one place.
    """
    conf = get_settings()
    text = _DDL.replace(" AS $$", f" {SEARCH_PATH} AS $$")
    return (
        pgsql.SQL(text)
        .format(
            api=pgsql.Identifier(schema),
            api_name=pgsql.Literal(schema),
            data=pgsql.Literal(data_schema),
            reg=pgsql.Identifier(data_schema, REGISTRY),
            marker=pgsql.Literal(MARKER),
            max_length=pgsql.SQL(str(MAX_NAME_LENGTH)),
            pattern=pgsql.Literal("^" + NAME_PATTERN.pattern + "$"),
            queue_prefix=pgsql.Literal(QUEUE_PREFIX),
            archive_prefix=pgsql.Literal(ARCHIVE_PREFIX),
            sequence_prefix=pgsql.Literal(SEQUENCE_PREFIX),
            channel_prefix=pgsql.Literal(CHANNEL_PREFIX),
            # Inside a quoted format() string: the column list has no quote or brace.
            columns=pgsql.SQL(QUEUE_COLUMNS),
            message_columns=pgsql.SQL(MESSAGE_COLUMNS),
            settle=_embedded("settle"),
            **{kind: _embedded(kind) for kind in (*GROUPED_KINDS, "create_fifo_index")},
            **{
                kind: _embedded(kind, b=pgsql.Identifier(data_schema, TOPIC_TABLE))
                for kind in ("bind", "unbind", "route", "test_routing", "list")
            },
            group_prefix=pgsql.Literal(GROUP_INDEX_PREFIX),
            max_topic=pgsql.SQL(str(MAX_TOPIC_LENGTH)),
            key_rules=pgsql.SQL(_rules_plpgsql(ROUTING_KEY_RULES)),
            pattern_rules=pgsql.SQL(_rules_plpgsql(TOPIC_PATTERN_RULES)),
            max_bytes=pgsql.SQL(str(int(conf.MAX_ARGS_BYTES))),
            max_depth=pgsql.SQL(str(int(conf.MAX_JSON_DEPTH))),
            max_batch=pgsql.SQL(str(MAX_BATCH)),
            partitioning=pgsql.Literal(ARCHIVE_PARTITIONING),
            partition_mark=pgsql.Literal(ARCHIVE_PARTITION_MARK),
            premade_days=pgsql.SQL(str(int(PREMADE_DAYS))),
            create_partition=_partition_statement(
                CREATE_PARTITION, partition="%1$s", parent="%2$s"
            ),
            attach_partition=_partition_statement(
                ATTACH_PARTITION, parent="%1$s", partition="%2$s", start="%3$s", end="%4$s"
            ),
            cutoff_days=pgsql.SQL(str(int(CONVERT_CUTOFF_DAYS))),
            check_suffix=pgsql.Literal(CONVERT_CHECK_SUFFIX),
            index_suffix=pgsql.Literal(CONVERT_INDEX_SUFFIX),
            convert_steps=_convert_statements(),
            floor_condition=pgsql.SQL(floor_for_plpgsql(6)),
            floor_candidates=pgsql.SQL(str(FLOOR_CANDIDATES)),
            **{
                name: pgsql.SQL(repr(float(getattr(ScanFloor, name.upper()))))
                for name in ("full_every", "full_every_max", "full_share", "margin", "trail")
            },
        )
        .as_string(None)
    )


def install(cursor: Any, schema: str) -> str:
    """Install (or reinstall) the API in ``schema``; returns the schema of our tables.

    Refuses a schema that holds the pgmq extension, or anything that is not a
    previous install of ours.
    """
    exists, ours, extension, objects = _schema_state(cursor, schema)
    if extension:
        raise SqlApiError(
            f"schema {schema!r} holds the pgmq extension; install the SQL API in another schema"
        )
    if exists and not ours and objects:
        raise SqlApiError(
            f"schema {schema!r} already holds other objects (a SQL-only pgmq install?); "
            "choose another schema"
        )
    data_schema = _data_schema(cursor)
    if data_schema == schema:
        raise SqlApiError(f"schema {schema!r} holds django_pgqueue's own tables")
    notified: list[tuple[str, int]] = []
    if exists:
        notified = _notified_queues(cursor, schema)
        cursor.execute(pgsql.SQL("DROP SCHEMA {} CASCADE").format(pgsql.Identifier(schema)))
    cursor.execute(ddl(schema, data_schema))
    for queue, interval_ms in notified:
        cursor.execute(
            pgsql.SQL("SELECT {}.enable_notify_insert(%s, %s)").format(pgsql.Identifier(schema)),
            [queue, interval_ms],
        )
    return data_schema


def _notified_queues(cursor: Any, schema: str) -> list[tuple[str, int]]:
    """The insert notifications a previous install had enabled (the drop of its schema
    takes their triggers), so that a reinstall enables them again."""
    table = pgsql.Identifier(schema, "notify_insert_throttle")
    cursor.execute("SELECT pg_catalog.to_regclass(%s)", [table.as_string(None)])
    if cursor.fetchone()[0] is None:
        return []
    cursor.execute(
        pgsql.SQL(
            "SELECT queue_name, throttle_interval_ms FROM {}.list_notify_insert_throttles()"
        ).format(pgsql.Identifier(schema))
    )
    return [(str(q), int(ms)) for q, ms in cursor.fetchall()]


def uninstall(cursor: Any, schema: str) -> bool:
    """Remove an install of ours from ``schema`` (queues and messages stay)."""
    exists, ours, _, _ = _schema_state(cursor, schema)
    if not exists:
        return False
    if not ours:
        raise SqlApiError(f"schema {schema!r} is not a django_pgqueue SQL API install")
    cursor.execute(pgsql.SQL("DROP SCHEMA {} CASCADE").format(pgsql.Identifier(schema)))
    return True
