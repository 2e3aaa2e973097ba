"""Every operation on message queues: the one place that changes their rows and tables.

Operations run on Django's connection to the queue database (``PGQUEUE['DATABASE']``),
so they join the caller's transaction: a message sent inside ``atomic()`` exists if
and only if that transaction commits, and a read inside one is undone by its
rollback. Outside a transaction each call is its own (autocommit). The worker's
functions (claim, settle, extend, read-back; ``source.MessageSource`` calls them)
run on the worker's own autocommit connection instead.

A queue's options are looked up once per process and cached for
``CONFIG_TTL_SECONDS``; a statement that finds the queue's table gone (the queue
was dropped elsewhere) raises QueueNotFound and forgets the cached entry.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from django.db import DatabaseError, connections, transaction

from ..conf import get_settings
from ..db import array_literal, text_array_literal
from ..notify import notifier
from ..scan_floor import ScanFloor
from ..sql import history as history_sql
from ..stored_json import DECODER
from . import partitions, sql
from .exceptions import (
    ArchiveNotReady,
    InvalidQueueName,
    QueueExists,
    QueueInUse,
    QueueNotFound,
)
from .partitions import check_retention
from .validation import (
    MAX_BATCH,
    MAX_QTY,
    MAX_VT_SECONDS,
    check_count,
    check_delay,
    check_headers,
    check_message,
    check_msg_id,
    check_name,
    check_read_cts,
    check_seconds,
)

#: Seconds a process trusts its cached copy of a queue's options.
CONFIG_TTL_SECONDS = 30.0


#: The header of a quarantined row: its queue, msg_id, read_ct and the decode error.
QUARANTINE_HEADER = sql.QUARANTINE_HEADER
#: Longest decode error kept in a quarantine note.
MAX_ERROR_LENGTH = 500

logger = logging.getLogger("django_pgqueue.mq")


def decode_json(text: str | None) -> Any:
    """A document as a statement of this module returns it (JSON text, or None for
    SQL NULL), decoded; raises ValueError or RecursionError on one Python cannot read."""
    return None if text is None else DECODER.decode(text)


def _problem(what: str, exc: BaseException) -> str:
    text = f"{what} cannot be decoded: {type(exc).__name__}: {exc}".replace("\x00", "")
    return text if len(text) <= MAX_ERROR_LENGTH else text[: MAX_ERROR_LENGTH - 3] + "..."


def decode_row(row: tuple[Any, ...]) -> Message | str:
    """The Message of a row (msg_id, read_ct, enqueued_at, vt, message, headers
    [, last_read_at]), or,
    when a document cannot be decoded, the error naming it.

    Rows are untrusted: any pgmq client, an older version or another program may
    have written them. Decoding costs one try per row; the caller decides what an
    error means (a read quarantines the row, the admin shows it).
    """
    try:
        message = decode_json(row[4])
    except (ValueError, RecursionError) as exc:
        return _problem("message", exc)
    try:
        headers = decode_json(row[5])
    except (ValueError, RecursionError) as exc:
        return _problem("headers", exc)
    return Message(row[0], row[1], row[2], row[3], message, headers, *row[6:7])


@dataclass(frozen=True)
class Message:
    """One message, as pgmq's ``message_record``.

    ``last_read_at`` (when the message was last read, None if never) comes last,
    unlike pgmq's record where it is fourth, so that positional code written for
    the first six fields keeps working.
    """

    msg_id: int
    read_ct: int
    enqueued_at: dt.datetime
    vt: dt.datetime
    message: Any
    headers: Any
    last_read_at: dt.datetime | None = None

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Message:
        """The Message of a row of this module's statements; ValueError if a document
        cannot be decoded (``decode_row`` returns the error instead)."""
        decoded = decode_row(row)
        if isinstance(decoded, str):
            raise ValueError(f"message {row[0]}: {decoded}")
        return decoded


@dataclass(frozen=True)
class QueueMetrics:
    """pgmq's ``metrics_result``: sizes and ages of one queue."""

    queue_name: str
    queue_length: int
    newest_msg_age_sec: int | None
    oldest_msg_age_sec: int | None
    total_messages: int
    scrape_time: dt.datetime
    queue_visible_length: int


@dataclass(frozen=True)
class QueueInfo:
    """A queue's options, from the registry."""

    name: str
    unlogged: bool
    max_reads: int | None
    dead_letter: str | None
    created_at: dt.datetime | None = None
    #: Set: the archive is partitioned by day and keeps this long (``partitions.py``).
    archive_retention: dt.timedelta | None = None


_cache: dict[str, tuple[float, QueueInfo]] = {}
_cache_lock = threading.Lock()


def _alias() -> str:
    return get_settings().DATABASE


#: psycopg's own timestamptz loader (C in psycopg[binary]). Django registers its own on
#: its connections, a Python subclass that re-attaches Django's timezone to each value:
#: a read of 100 messages parses 300 timestamps, and that subclass made them the larger
#: part of the read's CPU in Python. On a session in UTC (``USE_TZ``, the database's
#: TIME_ZONE unset) psycopg's loader returns the same values with the same
#: ``datetime.UTC``, so our cursors use it there (and keep Django's otherwise).
_TIMESTAMPTZ_OID = psycopg.adapters.types["timestamptz"].oid
_TIMESTAMPTZ_LOADER: Any = psycopg.adapters.get_loader(_TIMESTAMPTZ_OID, psycopg.pq.Format.TEXT)


@contextmanager
def _cursor(name: str | None = None) -> Iterator[Any]:
    """A cursor on Django's connection to the queue database (the caller's transaction).

    With ``PREPARED_STATEMENTS`` (the default) it is a server-binding psycopg cursor
    on that same connection, so the hot statements are prepared once per
    connection instead of parsed and planned on every call (Django's own cursors
    bind client-side); errors still come out as Django's. Otherwise it is a plain
    Django cursor (behind PgBouncer < 1.21 in transaction mode). A missing queue
    table becomes QueueNotFound.
    """
    connection = connections[_alias()]
    try:
        if get_settings().PREPARED_STATEMENTS:
            connection.ensure_connection()
            connection.validate_no_broken_transaction()
            with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
                if connection.timezone is dt.UTC:
                    cursor.adapters.register_loader(_TIMESTAMPTZ_OID, _TIMESTAMPTZ_LOADER)
                yield cursor
        else:
            with connection.cursor() as cursor:
                yield cursor
    except DatabaseError as exc:
        if name is not None and getattr(exc.__cause__, "sqlstate", None) == "42P01":
            forget(name)
            raise QueueNotFound(f"message queue {name!r} does not exist") from exc
        if name is not None and _no_archive_day(exc.__cause__, name):
            raise ArchiveNotReady(
                f"the archive of message queue {name!r} has no partition for today (UTC): "
                f"nothing was archived and the messages are still in the queue. The days "
                f"are made ahead by the workers' maintenance and by "
                f"'python manage.py pgqueue_prune', and neither has run for days; run it "
                f"(daily from cron where no worker runs)"
            ) from exc
        raise


def _no_archive_day(error: BaseException | None, name: str) -> bool:
    """``error`` is PostgreSQL's "no partition of relation ... found for row" on
    ``name``'s archive: a check violation (23514) that names the partitioned table
    and no constraint (a CHECK of the table would name itself)."""
    diag = getattr(error, "diag", None)
    return (
        getattr(error, "sqlstate", None) == "23514"
        and diag is not None
        and diag.constraint_name is None
        and diag.table_name == partitions.family(name).table
    )


def forget(name: str) -> None:
    """Drop the cached options of ``name``, and its reads' scan floor."""
    with _cache_lock:
        _cache.pop(name, None)
    _read_floors.forget(_floor_key(name))


def get_queue(name: str, conn: Any = None) -> QueueInfo:
    """The options of queue ``name``; QueueNotFound if there is no such queue.

    ``conn``: a psycopg connection to ask instead of Django's (the worker's).
    """
    check_name(name)
    entry = _cache.get(name)
    if entry is not None and entry[0] > time.monotonic():
        return entry[1]
    if conn is not None:
        row = conn.execute(sql.GET_QUEUE, [name]).fetchone()
    else:
        with _cursor() as cursor:
            cursor.execute(sql.GET_QUEUE, [name])
            row = cursor.fetchone()
    if row is None:
        forget(name)
        raise QueueNotFound(f"message queue {name!r} does not exist; create it with mq.create()")
    info = QueueInfo(*row)
    with _cache_lock:
        _cache[name] = (time.monotonic() + CONFIG_TTL_SECONDS, info)
    return info


# -- queues ----------------------------------------------------------------------------


def create(
    name: str,
    *,
    unlogged: bool = False,
    max_reads: int | None = None,
    dead_letter: str | None = None,
    archive_retention: dt.timedelta | float | None = None,
) -> QueueInfo:
    """Create queue ``name`` (idempotent when the options match).

    ``unlogged=True`` makes its message table UNLOGGED: faster, and a database
    crash empties it. ``max_reads=N`` dead-letters a message on the read after its
    N-th, into queue ``dead_letter`` (which must exist) or, without one, into this
    queue's archive. ``archive_retention`` (a ``timedelta`` or seconds) partitions
    the archive by day of ``archived_at``: retention then drops a day's archived
    messages whole, once the day is that old (``mq.partitions``).
    """
    check_name(name)
    retention = None if archive_retention is None else check_retention(name, archive_retention)
    if max_reads is not None:
        check_count("max_reads", max_reads, 1_000_000)
    if dead_letter is not None:
        if max_reads is None:
            raise ValueError("dead_letter needs max_reads (when a message becomes a dead letter)")
        if dead_letter == name:
            raise ValueError(f"queue {name!r} cannot be its own dead-letter queue")
        get_queue(dead_letter)
    wanted = QueueInfo(name, bool(unlogged), max_reads, dead_letter, archive_retention=retention)
    partitioned = retention is not None
    with transaction.atomic(using=_alias()), _cursor() as cursor:
        cursor.execute(
            sql.REGISTER_QUEUE, [name, wanted.unlogged, max_reads, dead_letter, retention]
        )
        if cursor.fetchone() is None:
            forget(name)
            existing = get_queue(name)
            options = ("unlogged", "max_reads", "dead_letter", "archive_retention")
            if any(getattr(existing, o) != getattr(wanted, o) for o in options):
                shown = ", ".join(f"{o}={getattr(existing, o)!r}" for o in options)
                raise QueueExists(f"message queue {name!r} exists with other options ({shown})")
            return existing
        for kind in (
            "create_queue",
            "create_queue_index",
            "create_archive",
            "create_archive_index",
        ):
            cursor.execute(
                sql.statement(kind, name, unlogged=wanted.unlogged, partitioned=partitioned)
            )
        if partitioned:
            cursor.execute(history_sql.TODAY_UTC)
            (today,) = cursor.fetchone()
            for statement in partitions.premade_ddl(name, today):
                cursor.execute(statement.as_string(None))
    forget(name)
    return wanted


def convert_archive_partitioned(name: str, archive_retention: dt.timedelta | float) -> QueueInfo:
    """Partition the plain archive of existing queue ``name`` by day, online, and keep
    ``archive_retention`` (a ``timedelta`` or seconds) of it from then on.

    No archived message moves: the archive becomes the partition holding every day
    before a cutoff two UTC midnights ahead, dropped whole by retention once that
    day is past ``archive_retention`` (``sql.CONVERT_ARCHIVE``). Three transactions,
    so archives go on being written: a check (a moment's lock), its validation
    (a scan that blocks no reader or writer), then the swap (a moment's lock:
    catalogue changes only). A lock not granted within 2 s is QueueInUse, with
    nothing changed. Idempotent: a queue already partitioned with this retention is
    returned as it is. Run it outside a transaction of yours, or it all becomes one.
    """
    check_name(name)
    retention = check_retention(name, archive_retention)
    forget(name)
    existing = get_queue(name)
    if existing.archive_retention is not None:
        if existing.archive_retention == retention:
            return existing
        raise QueueExists(
            f"the archive of message queue {name!r} is partitioned already, with "
            f"archive_retention={existing.archive_retention!r}"
        )
    with _cursor(name) as cursor:
        cursor.execute(history_sql.TODAY_UTC)
        (today,) = cursor.fetchone()
    steps = partitions.conversion_ddl(name, today)

    def run(*names: str, retention_row: bool = False) -> None:
        with transaction.atomic(using=_alias()), _cursor(name) as cursor:
            cursor.execute(history_sql.DDL_LOCK_TIMEOUT)
            if retention_row:
                cursor.execute(sql.SET_ARCHIVE_RETENTION, [retention, name])
                if cursor.rowcount != 1:
                    raise QueueExists(
                        f"message queue {name!r} was dropped or its archive partitioned "
                        "while this conversion ran"
                    )
            for step in names:
                for statement in steps[step]:
                    cursor.execute(statement.as_string(None))

    checked = False
    try:
        run("undo", "check")  # a check an interrupted conversion left goes first
        checked = True
        run("validate")
        run("swap", "premade", retention_row=True)
    except BaseException as exc:
        undone = not checked
        if checked:
            with contextlib.suppress(Exception):  # the archive is still plain: its check goes
                run("undo")
                undone = True
        if not undone:
            logger.error(
                "Converting the archive of message queue %r failed and its check %r "
                "remains: it refuses messages archived from %s UTC on. Run "
                "convert_archive_partitioned again, or drop the check.",
                name,
                partitions.conversion_check(name),
                today + dt.timedelta(days=partitions.CONVERT_CUTOFF_DAYS),
            )
        if getattr(exc.__cause__, "sqlstate", None) == "55P03":
            raise QueueInUse(
                f"the archive of message queue {name!r} is in use: a lock on it was not "
                "granted within 2 s (a long transaction reads or writes it); "
                + ("nothing was changed, " if undone else "")
                + "try again"
            ) from exc
        raise
    finally:
        forget(name)
    return get_queue(name)


def drop(name: str) -> bool:
    """Drop queue ``name``, its messages and its archive. False if it did not exist."""
    check_name(name)
    with transaction.atomic(using=_alias()), _cursor() as cursor:
        cursor.execute(sql.DEAD_LETTER_SOURCES, [name])
        sources = [row[0] for row in cursor.fetchall()]
        if sources:
            raise QueueInUse(
                f"message queue {name!r} is the dead-letter queue of {', '.join(sources)}; "
                "drop those first"
            )
        cursor.execute(sql.UNREGISTER_QUEUE, [name])
        existed = cursor.rowcount > 0
        cursor.execute(sql.statement("drop", name))
    forget(name)
    return existed


def list_queues(left_out: list[str] | None = None) -> list[QueueInfo]:
    """Every message queue, by name. A registry row no queue could have (inserted by
    SQL with a name the rules refuse) is left out, so one bad row never hides the
    others or fails a call over all queues; each is said in ``left_out``."""
    with _cursor() as cursor:
        cursor.execute(sql.LIST_QUEUES)
        rows = [QueueInfo(*row) for row in cursor.fetchall()]
    kept = []
    for info in rows:
        try:
            check_name(info.name)
        except InvalidQueueName as exc:
            if left_out is not None:
                left_out.append(
                    f"the row {info.name!r} of pgqueue_mq_queue is no message queue ({exc}); "
                    f"it was written past mq.create: delete it"
                )
            continue
        kept.append(info)
    return kept


# -- messages --------------------------------------------------------------------------


def _wake(name: str) -> None:
    """NOTIFY the queue's readers after the caller's commit (coalesced; never fails)."""
    if get_settings().NOTIFY:
        channel = sql.channel(name)
        transaction.on_commit(lambda: notifier.request(channel), using=_alias())


def send(
    name: str,
    message: dict[str, Any] | list[Any],
    *,
    delay: float | dt.datetime = 0,
    headers: dict[str, Any] | None = None,
) -> int:
    """Send one message; returns its ``msg_id``. ``delay``: seconds or an aware datetime."""
    seconds, at = check_delay(delay)
    body = check_message(message)
    head = check_headers(headers)
    get_queue(name)
    with _cursor(name) as cursor:
        cursor.execute(sql.statement("send", name), [at, seconds, body, head])
        msg_id: int = cursor.fetchone()[0]
    _wake(name)
    return msg_id


def send_batch(
    name: str,
    messages: Iterable[dict[str, Any] | list[Any]],
    *,
    delay: float | dt.datetime = 0,
    headers: Iterable[dict[str, Any] | None] | None = None,
) -> list[int]:
    """Send many messages in one statement; returns their ids in order."""
    seconds, at = check_delay(delay)
    bodies: list[str | None] = [check_message(m, f"messages[{i}]") for i, m in enumerate(messages)]
    check_count("the number of messages", len(bodies), MAX_BATCH)
    heads: list[str | None] | None = None
    if headers is not None:
        heads = [check_headers(h) for h in headers]
        if len(heads) != len(bodies):
            raise ValueError(f"{len(heads)} headers for {len(bodies)} messages")
    get_queue(name)
    with _cursor(name) as cursor:
        cursor.execute(
            sql.statement("send_batch", name),
            [
                at,
                seconds,
                text_array_literal(bodies),
                None if heads is None else text_array_literal(heads),
            ],
        )
        ids = [row[0] for row in cursor.fetchall()]
    _wake(name)
    return ids


def read(name: str, vt: float = 30, qty: int = 1) -> list[Message]:
    """Read up to ``qty`` visible messages and hide them for ``vt`` seconds.

    Each read increments ``read_ct``. A message neither deleted nor archived
    within ``vt`` becomes visible again. With ``max_reads``, a message already
    read that many times is moved to the dead-letter queue instead of returned
    (so a read may return fewer than ``qty`` while more are waiting).
    """
    vt = check_seconds("vt", vt, MAX_VT_SECONDS)
    qty = check_count("qty", qty, MAX_QTY)
    info = get_queue(name)
    connection = connections[_alias()]
    own_transaction = connection.get_autocommit() and not connection.in_atomic_block
    with _cursor(name) as cursor:

        def fetch(query: str, params: list[Any]) -> list[Any]:
            cursor.execute(query, params)
            return cursor.fetchall()

        rows = _read_rows(fetch, info, vt, qty, _read_floors if own_transaction else None)
    return _decoded(rows, info, _executor(name))


#: The scan floor of :func:`read` in this process, one state per queue: used only for
#: a read that is its own transaction (autocommit, outside ``transaction.atomic``),
#: whose snapshot is then never older than its start. Any such read, on any thread,
#: is as good a witness as another.
_read_floors = ScanFloor()


def _floor_key(name: str) -> str:
    """The key of a queue's reads in a ScanFloor (the claim loop's, or ``_read_floors``)."""
    return "mq:" + name


def _read_rows(
    fetch: Callable[[str, list[Any]], list[Any]],
    info: QueueInfo,
    vt: float,
    qty: int,
    floors: ScanFloor | None,
) -> list[Any]:
    """The rows of one read of ``qty`` messages, above the scan floor ``floors`` keeps
    for the queue (key ``"mq:<queue>"``) if there is one, and its outcome recorded.

    A read that moved dead letters returns fewer messages than it picked, and so
    counts as short for the floor: a backlog below the floor then waits for the
    next full read, as a message sent by a long transaction does.
    """
    key = _floor_key(info.name)
    started = time.monotonic()
    floor = None if floors is None else floors.age(key, started)
    query, params = read_query(info, vt, qty, floor)
    rows = fetch(query, params)
    if floors is not None:
        floors.record(key, started, time.monotonic(), floor, len(rows) < qty)
    return rows


Execute = Callable[[str, list[Any]], Any]


def _executor(name: str) -> Execute:
    """Run one statement on Django's connection (the caller's transaction)."""

    def execute(query: str, params: list[Any]) -> None:
        with _cursor(name) as cursor:
            cursor.execute(query, params)

    return execute


def _decoded(
    rows: list[Any],
    info: QueueInfo,
    execute: Execute,
    *,
    popped: bool = False,
    keep_order: bool = False,
) -> list[Message]:
    """The Messages of the rows a read returned, in ``msg_id`` order (in the order the
    statement returned them with ``keep_order``: the grouped reads).

    A row Python cannot decode is quarantined (``quarantine``) and left out: the
    read has already hidden and counted the whole batch, so raising here would
    cost every message beside it a read, and a consumer would fail every claim.
    """
    if not keep_order:
        rows.sort()
    messages: list[Message] = []
    bad: list[tuple[Any, str]] = []
    for row in rows:
        decoded = decode_row(row)
        if isinstance(decoded, Message):
            messages.append(decoded)
        else:
            bad.append((row, decoded))
    if bad:
        quarantine(execute, info, bad, popped=popped)
    return messages


def quarantine(
    execute: Execute, info: QueueInfo, bad: list[tuple[Any, str]], *, popped: bool = False
) -> None:
    """Move undecodable rows where the queue's dead letters go, each with its error.

    The dead-letter queue when the queue has one, else the queue's archive (the
    rows of ``bad`` are ``(row, error)``). A row still in the queue moves only if no
    other read took it since (read_ct fence); a popped row is put back from its
    text. The error is logged and kept in the row's ``x-pgqueue-quarantine`` header.
    """
    target = "queue" if info.dead_letter else "archive"
    names = [info.name] * (2 if info.dead_letter else 1)
    if popped:
        query = sql.statement(f"quarantine_popped_{target}", info.name, info.dead_letter)
        for row, error in bad:
            execute(query, [*row[:6], error, *names])
    else:
        query = sql.statement(f"quarantine_{target}", info.name, info.dead_letter)
        msg_ids, read_cts = _fence((row[0], row[1]) for row, _ in bad)
        execute(query, [msg_ids, read_cts, text_array_literal([e for _, e in bad]), *names])
    where = f"dead-letter queue {info.dead_letter!r}" if info.dead_letter else "its archive"
    for row, error in bad:
        logger.error(
            "Message %s of queue %r quarantined into %s: %s", row[0], info.name, where, error
        )


def read_query(
    info: QueueInfo, vt: float, qty: int, floor: float | None = None
) -> tuple[str, list[Any]]:
    """The read statement of a queue (with its dead-letter policy) and its parameters;
    with ``floor`` (seconds), its floored variant (``mq/sql.py``, ``_FLOOR``)."""
    name = info.name
    suffix = ""
    picking: list[float] = [qty]
    if floor is not None:
        suffix, picking = sql.FLOORED, [floor, max(sql.FLOOR_CANDIDATES, 4 * qty), qty]
    if info.max_reads is None:
        return sql.statement("read" + suffix, name), [*picking, vt]
    if info.dead_letter is None:
        query = sql.statement("read_dead_letter_archive" + suffix, name)
        return query, [info.max_reads, *picking, vt]
    query = sql.statement("read_dead_letter_queue" + suffix, name, info.dead_letter)
    return query, [info.max_reads, *picking, name, vt]


def pop(name: str, qty: int = 1) -> list[Message]:
    """Read and delete up to ``qty`` messages at once (at-most-once delivery)."""
    qty = check_count("qty", qty, MAX_QTY)
    info = get_queue(name)
    with _cursor(name) as cursor:
        cursor.execute(sql.statement("pop", name), [qty])
        rows = cursor.fetchall()
    return _decoded(rows, info, _executor(name), popped=True)


def set_vt(name: str, msg_id: int, vt: float | dt.datetime) -> Message | None:
    """Make message ``msg_id`` visible ``vt`` seconds from now (0: at once), or at the
    aware datetime ``vt``.

    None if there is no such message, or if it could not be decoded (it is then
    quarantined, like a read would).
    """
    seconds, at = check_delay(vt, "vt", MAX_VT_SECONDS)
    msg_id = check_msg_id(msg_id)
    info = get_queue(name)
    with _cursor(name) as cursor:
        cursor.execute(sql.statement("set_vt", name), [at, seconds, msg_id])
        rows = cursor.fetchall()
    messages = _decoded(rows, info, _executor(name))
    return messages[0] if messages else None


def _id_list(msg_ids: int | Iterable[int]) -> list[int]:
    """Message ids, each checked (``check_msg_id``)."""
    if isinstance(msg_ids, int | str):
        msg_ids = [msg_ids]
    return [check_msg_id(i, f"msg_ids[{n}]") for n, i in enumerate(msg_ids)]


def _ids(msg_ids: int | Iterable[int]) -> str:
    """The ``bigint[]`` literal of message ids, each checked (``check_msg_id``)."""
    return array_literal([str(i) for i in _id_list(msg_ids)])


ReadCounts = int | list[int] | tuple[int, ...]


def archive(
    name: str, msg_ids: int | Iterable[int], *, read_ct: ReadCounts | None = None
) -> list[int]:
    """Move messages to the queue's archive; returns the ids that were archived.

    With ``read_ct`` (the ``read_ct`` of the read that handed each message out, one
    per id) a message is archived only while that read is still the current one: a
    consumer whose visibility timeout lapsed, and whose message another consumer has
    read since, archives nothing (``_fenced``).
    """
    if read_ct is not None:
        return _fenced(name, msg_ids, read_ct, "archive")
    get_queue(name)
    with _cursor(name) as cursor:
        cursor.execute(sql.statement("archive", name), [_ids(msg_ids)])
        return sorted(row[0] for row in cursor.fetchall())


def delete(
    name: str, msg_ids: int | Iterable[int], *, read_ct: ReadCounts | None = None
) -> list[int]:
    """Delete messages for good; returns the ids that were deleted. ``read_ct``
    fences the delete as for ``archive``."""
    if read_ct is not None:
        return _fenced(name, msg_ids, read_ct, "delete")
    get_queue(name)
    with _cursor(name) as cursor:
        cursor.execute(sql.statement("delete", name), [_ids(msg_ids)])
        return sorted(row[0] for row in cursor.fetchall())


def _fenced(name: str, msg_ids: int | Iterable[int], read_ct: ReadCounts, action: str) -> list[int]:
    """Archive or delete only the messages whose read is still current: the statement
    and rule of the worker's ``settle`` (every consumer outcome is fenced the same
    way), on the caller's connection and transaction."""
    ids = _id_list(msg_ids)
    cts = check_read_cts(read_ct, len(ids))
    get_queue(name)
    with _cursor(name) as cursor:
        cursor.execute(
            sql.statement("settle", name),
            _settle_params([(i, c, action, 0.0) for i, c in zip(ids, cts, strict=True)]),
        )
        return sorted(row[0] for row in cursor.fetchall())


def move(name: str, msg_ids: int | Iterable[int], to: str) -> list[int]:
    """Move messages of ``name`` to queue ``to`` (visible at once, new ids there)."""
    get_queue(name)
    get_queue(to)
    with _cursor(name) as cursor:
        cursor.execute(sql.statement("move", name, to), [_ids(msg_ids)])
        ids = sorted(row[0] for row in cursor.fetchall())
    _wake(to)
    return ids


def purge(name: str) -> int:
    """Delete every message of the queue (not its archive); returns how many."""
    get_queue(name)
    with _cursor(name) as cursor:
        cursor.execute(sql.statement("purge", name))
        count: int = cursor.fetchone()[0]
    return count


def metrics(name: str) -> QueueMetrics:
    """Length, visible length, newest and oldest age, total sent, scrape time."""
    get_queue(name)
    with _cursor(name) as cursor:
        cursor.execute(sql.statement("metrics", name))
        row = cursor.fetchone()
    return QueueMetrics(name, row[0], row[1], row[2], row[3], row[4], row[5])


def metrics_all() -> list[QueueMetrics]:
    """``metrics`` of every queue."""
    return [metrics(info.name) for info in list_queues()]


def stats(name: str) -> tuple[int, int, float | None, int]:
    """(length, visible, oldest age in seconds, archive size: exact up to 10,000 rows,
    estimated beyond) for the admin."""
    s = status(name)
    return s.messages, s.visible, s.oldest_seconds, s.archived_estimate


@dataclass(frozen=True)
class QueueStatus:
    """One queue as operations see it (``pgqueue_status``, the metrics, the admin).

    ``dead_letters`` is the length of this queue when another queue sends its dead
    letters here, else None.
    """

    name: str
    messages: int
    visible: int
    in_flight: int
    delayed: int
    oldest_seconds: float | None
    oldest_visible_seconds: float | None
    archived_estimate: int
    dead_letter: str | None
    dead_letters: int | None


def status(name: str, *, is_dead_letter_queue: bool = False) -> QueueStatus:
    """The sizes and ages of queue ``name`` (one statement; changes nothing)."""
    info = get_queue(name)
    archive_table = sql.identifiers(name)["a"].as_string(None)
    with _cursor(name) as cursor:
        cursor.execute(sql.statement("stats", name), [archive_table])
        length, visible, oldest, archived, in_flight, oldest_visible = cursor.fetchone()
    return QueueStatus(
        name,
        length,
        visible,
        in_flight,
        length - visible - in_flight,
        None if oldest is None else float(oldest),
        None if oldest_visible is None else float(oldest_visible),
        archived,
        info.dead_letter,
        length if is_dead_letter_queue else None,
    )


def overview(left_out: list[str] | None = None) -> list[QueueStatus]:
    """``status`` of every queue, by name; a queue dropped meanwhile is left out, and
    so are registry rows no queue could have (said in ``left_out``, ``list_queues``)."""
    queues = list_queues(left_out)
    targets = {q.dead_letter for q in queues if q.dead_letter}
    found = []
    for info in queues:
        try:
            found.append(status(info.name, is_dead_letter_queue=info.name in targets))
        except QueueNotFound:
            continue
    return found


def browse(name: str, *, archived: bool = False, limit: int = 100, offset: int = 0) -> list[Any]:
    """Messages (or archived messages) of a queue, for the admin; changes nothing."""
    get_queue(name)
    kind = "browse_archive" if archived else "browse"
    with _cursor(name) as cursor:
        cursor.execute(sql.statement(kind, name), [limit, offset])
        return cursor.fetchall()


@dataclass(frozen=True)
class MovedBack:
    """What ``move_back`` did: per origin queue, the ids moved and their new ids
    there; the ids it refused, each with the reason."""

    moved: dict[str, tuple[list[int], list[int]]]
    refused: dict[int, str]


def move_back(name: str, msg_ids: int | Iterable[int]) -> MovedBack:
    """Return dead letters of queue ``name`` to the queues they came from.

    A letter's ``x-pgqueue-dead-letter`` header names its origin, but anyone who can
    write to a dead-letter queue can write that header: a letter moves only to a
    queue whose configured dead-letter queue is ``name``, so a forged header cannot
    make an operator inject messages into any other queue. The others stay, each
    refused with the reason.
    """
    ids = sorted(
        {check_msg_id(i, "msg_id") for i in ([msg_ids] if isinstance(msg_ids, int) else msg_ids)}
    )
    get_queue(name)
    refused: dict[int, str] = {}
    by_origin: dict[str, list[int]] = {}
    with transaction.atomic(using=_alias()):
        with _cursor(name) as cursor:
            cursor.execute(sql.DEAD_LETTER_SOURCES, [name])
            sources = {row[0] for row in cursor.fetchall()}
            cursor.execute(sql.statement("dead_letter_origins", name), [_ids(ids)])
            origins: dict[int, str | None] = dict(cursor.fetchall())
        for msg_id in ids:
            origin = origins.get(msg_id, "")
            if msg_id not in origins:
                refused[msg_id] = "gone"
            elif origin is None:
                refused[msg_id] = (
                    f"not a dead letter (no {sql.DEAD_LETTER_HEADER} header naming its queue)"
                )
            elif origin not in sources:
                refused[msg_id] = (
                    f"its header names queue {origin[:60]!r}, "
                    f"whose dead-letter queue is not {name!r}"
                )
            else:
                by_origin.setdefault(origin, []).append(msg_id)
        moved = {
            origin: (group, move(name, group, to=origin))
            for origin, group in sorted(by_origin.items())
        }
    return MovedBack(moved, refused)


# -- the worker (mq/source.py) ----------------------------------------------------------
#
# ``MessageSource`` calls these and runs no SQL itself. They run on the worker's own
# autocommit psycopg connection (``conn``), not Django's. Every write for a message a
# consumer holds is guarded by the ``read_ct`` of the read that handed it out, its
# fencing token: a later read of the message increments it, so a worker that lost
# the message (killed, stalled past its time limit) changes nothing.


def claim(
    conn: Any, info: QueueInfo, vt: float, qty: int, floors: ScanFloor | None = None
) -> list[Message]:
    """Read up to ``qty`` messages of a queue for a consumer, hidden for ``vt`` seconds
    (with the queue's dead-letter policy), in ``msg_id`` order; above the claim
    loop's scan floor (``floors``), if it passed one.

    QueueNotFound, with the cached options forgotten, if the queue's table was
    dropped since its options were cached.
    """
    try:
        rows = _read_rows(lambda q, p: conn.execute(q, p).fetchall(), info, vt, qty, floors)
    except psycopg.errors.UndefinedTable as exc:
        forget(info.name)
        raise QueueNotFound(f"message queue {info.name!r} does not exist") from exc
    return _decoded(rows, info, conn.execute)


def any_visible(conn: Any, name: str) -> bool:
    """Whether a message of the queue is visible now (``--burst``)."""
    return bool(conn.execute(sql.statement("any_visible", name)).fetchone()[0])


def _fence(held: Iterable[tuple[int, int]]) -> tuple[str, str]:
    """The ``msg_id`` and ``read_ct`` arrays of held messages, as array literals."""
    pairs = list(held)
    return (
        array_literal([str(msg_id) for msg_id, _ in pairs]),
        array_literal([str(read_ct) for _, read_ct in pairs]),
    )


def settle(conn: Any, name: str, outcomes: Iterable[tuple[int, int, str, float]]) -> set[int]:
    """Write consumers' outcomes for one queue in one statement; the msg_ids written.

    Each outcome is ``(msg_id, read_ct, action, delay)``: ``archive``, ``delete``,
    ``retry`` (visible again after ``delay`` seconds) or ``release`` (visible at once,
    the read not counted). A message missing from the answer was read again since.
    """
    written = conn.execute(sql.statement("settle", name), _settle_params(list(outcomes)))
    return {row[0] for row in written.fetchall()}


def _settle_params(rows: list[tuple[int, int, str, float]]) -> list[str]:
    """The parameters of the ``settle`` statement for ``(msg_id, read_ct, action, delay)``."""
    msg_ids, read_cts = _fence((msg_id, read_ct) for msg_id, read_ct, _, _ in rows)
    actions = text_array_literal([action for _, _, action, _ in rows])
    delays = array_literal([repr(float(delay)) for _, _, _, delay in rows])
    return [msg_ids, read_cts, actions, delays]


def read_counts(conn: Any, name: str, msg_ids: Iterable[int]) -> dict[int, int]:
    """``read_ct`` of each of these messages still in the queue (to settle an ambiguous
    commit: a message missing was archived or deleted)."""
    ids = array_literal([str(msg_id) for msg_id in msg_ids])
    return dict(conn.execute(sql.statement("read_counts", name), [ids]).fetchall())


def extend(conn: Any, name: str, held: Iterable[tuple[int, int]], vt: float) -> set[int]:
    """Hide held ``(msg_id, read_ct)`` messages for ``vt`` more seconds; the msg_ids
    still held (a message missing was read again since)."""
    msg_ids, read_cts = _fence(held)
    rows = conn.execute(sql.statement("extend", name), [vt, msg_ids, read_cts]).fetchall()
    return {row[0] for row in rows}
