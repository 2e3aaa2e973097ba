"""Partitioned archives: a message queue's archive kept by day, dropped by day.

A queue created with ``archive_retention`` (``mq.create(name,
archive_retention=...)``, or pgmq's ``create_partitioned`` through the SQL API) has
an archive partitioned by RANGE on ``archived_at``, one partition per UTC day
(``pgqueue_mq_a_<name>@<YYYYMMDD>``). The partitions are the job history's kind
(``history.Family``), made and dropped by the same code:

* :func:`premade_ddl`: the partitions of today and ``history.PREMADE_DAYS`` more,
  made by the create itself (in its transaction), so the first archive never
  waits for a worker;
* :func:`maintain`: in the workers' maintenance pass (``worker/housekeeping.py``),
  the partitions ahead of every partitioned archive and, with
  ``PGQUEUE["MAINTENANCE_RETENTION"]``, retention;
* :func:`drop_expired`: retention, also run by ``pgqueue_prune``: a partition goes
  once its whole day is older than its queue's ``archive_retention``
  (``DETACH ... CONCURRENTLY``, then ``DROP``), so it costs catalogue changes, never
  a row-by-row delete.

An existing queue's plain archive is converted by
``store.convert_archive_partitioned`` with :func:`conversion_ddl`: the archive
becomes the partition of every day before a cutoff, and no message moves.

There is no DEFAULT partition, for the reasons the job history has none
(docs/operations.md). An archive on a day without a partition (no worker ran its
maintenance for ``PREMADE_DAYS`` days) fails with PostgreSQL's "no partition of
relation ... found for row", and ``pgqueue_status`` warns the day before.

Only the queue's messages that were archived are ever dropped: the queue's own
table is never partitioned, so a message nobody has handled stays, whatever its age.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Callable, Sequence
from typing import Any

from psycopg import sql as pgsql

from .. import history
from . import sql
from .validation import MAX_PARTITIONED_NAME_LENGTH, MAX_RETENTION

#: The key of an archive's partitions in retention plans and reports.
KEY = "archive"


def check_retention(name: str, value: object) -> dt.timedelta:
    """``value`` (a ``timedelta`` or seconds) as the retention of queue ``name``'s
    partitioned archive; ValueError naming the problem otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float | dt.timedelta):
        raise ValueError(
            f"archive_retention must be a timedelta or a number of seconds, got {value!r}"
        )
    if not isinstance(value, dt.timedelta):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"archive_retention must be a finite number of seconds, got {value!r}")
        if not 0 < value <= MAX_RETENTION.total_seconds():
            raise ValueError(
                f"archive_retention must be more than 0 and at most {MAX_RETENTION.days} days, "
                f"got {value!r} seconds"
            )
        value = dt.timedelta(seconds=value)
    if not dt.timedelta(0) < value <= MAX_RETENTION:
        raise ValueError(
            f"archive_retention must be more than 0 and at most {MAX_RETENTION.days} days, "
            f"got {value}"
        )
    if len(name) > MAX_PARTITIONED_NAME_LENGTH:
        raise ValueError(
            f"queue name {name!r} is too long for a partitioned archive: at most "
            f"{MAX_PARTITIONED_NAME_LENGTH} characters (its day partitions are named "
            f"{sql.ARCHIVE_PREFIX}<name>{sql.ARCHIVE_PARTITION_MARK}<YYYYMMDD>)"
        )
    return value


def family(name: str) -> history.Family:
    """The day partitions of queue ``name``'s archive (``name`` already validated)."""
    table = sql.ARCHIVE_PREFIX + name
    return history.Family(
        table=table,
        keys=(KEY,),
        parent_format="{table}",
        name_format="{table}" + sql.ARCHIVE_PARTITION_MARK + "{day:%Y%m%d}",
        pattern="^" + re.escape(table + sql.ARCHIVE_PARTITION_MARK) + r"(?P<day>[0-9]{8})$",
    )


def premade_ddl(name: str, today: dt.date) -> list[pgsql.Composed]:
    """The statements that make the partitions of ``today`` and the days after it that
    maintenance keeps made, for a partitioned archive being created."""
    archive = family(name)
    return [
        statement
        for offset in range(history.PREMADE_DAYS + 1)
        for statement in history.partition_ddl(archive, KEY, today + dt.timedelta(days=offset))
    ]


def partitioned_archives(conn: Any) -> list[tuple[str, float]]:
    """(queue name, retention in seconds) of every queue whose archive is partitioned."""
    return [(name, float(age)) for name, age in conn.execute(sql.PARTITIONED_ARCHIVES).fetchall()]


@dataclasses.dataclass
class ArchiveReport:
    """What one pass over the partitioned archives did."""

    partitions_made: int = 0
    dropped: dict[str, int] = dataclasses.field(default_factory=dict)  #: partition -> rows
    by_queue: dict[str, int] = dataclasses.field(default_factory=dict)  #: queue -> rows


def drop_expired(
    conn: Any,
    *,
    dry_run: bool = False,
    progress: Callable[[str], None] | None = None,
    now: dt.datetime | None = None,
) -> ArchiveReport:
    """Drop (or count, with ``dry_run``) every archive partition whose whole day is
    older than its queue's ``archive_retention``."""
    report = ArchiveReport()
    for name, age in partitioned_archives(conn):
        dropped = history.drop_expired(
            conn, {KEY: age}, dry_run=dry_run, progress=progress, family=family(name), now=now
        )
        report.dropped.update(dropped.dropped)
        if dropped.dropped:
            report.by_queue[name] = sum(dropped.dropped.values())
    return report


def maintain(
    conn: Any, *, retention: bool, stopping: Callable[[], bool] = lambda: False
) -> ArchiveReport:
    """The maintenance pass's part for the archives: the partitions ahead of every
    partitioned archive and, with ``retention``, :func:`drop_expired`. Each partition
    is made under the maintenance lock, as the job history's are; the caller passes
    ``retention`` only when its pass took that lock (``MaintenanceReport.locked``),
    so one worker at a time drops."""
    report = ArchiveReport()
    for name, _age in partitioned_archives(conn):
        if stopping():
            return report
        report.partitions_made += history.ensure_partitions(conn, family=family(name))
    if retention and not stopping():
        dropped = drop_expired(conn)
        report.dropped, report.by_queue = dropped.dropped, dropped.by_queue
    return report


# -- converting a plain archive (store.convert_archive_partitioned) -----------------------

#: How many UTC midnights ahead the converted archive's bound is (its check must hold
#: for every message archived while the conversion runs).
CONVERT_CUTOFF_DAYS = 2


def conversion_check(name: str) -> str:
    """The name of the check a conversion of queue ``name``'s archive adds."""
    return sql.ARCHIVE_PREFIX + name + sql.CONVERT_CHECK_SUFFIX


def conversion_ddl(name: str, today: dt.date) -> dict[str, list[pgsql.Composed]]:
    """The statements converting queue ``name``'s plain archive (``sql.CONVERT_ARCHIVE``,
    by step, plus ``premade``: the day partitions from the cutoff to
    ``history.PREMADE_DAYS`` ahead), with its cutoff ``CONVERT_CUTOFF_DAYS`` after
    ``today``."""
    ids = sql.identifiers(name)
    cutoff = today + dt.timedelta(days=CONVERT_CUTOFF_DAYS)
    archive = family(name)
    legacy = pgsql.Identifier(archive.name(KEY, cutoff - dt.timedelta(days=1)))
    # Python's names are unqualified (the connection's search_path): the qualified
    # and the bare placeholders of the SQL API's form are the same identifiers here.
    parts = {
        "a": ids["a"],
        "a_id": ids["a_id"],
        "a_id_name": ids["a_id"],
        "check": pgsql.Identifier(conversion_check(name)),
        "legacy": legacy,
        "legacy_table": legacy,
        "legacy_id": pgsql.Identifier(sql.ARCHIVE_PREFIX + name + sql.CONVERT_INDEX_SUFFIX),
        "cutoff": pgsql.Literal(f"{cutoff.isoformat()} 00:00:00+00"),
    }

    def render(templates: str | Sequence[str]) -> list[pgsql.Composed]:
        listed = [templates] if isinstance(templates, str) else templates
        return [pgsql.SQL(t).format(**parts) for t in listed]

    steps = {step: render(templates) for step, templates in sql.CONVERT_ARCHIVE.items()}
    last = today + dt.timedelta(days=history.PREMADE_DAYS)
    steps["premade"] = [
        statement
        for offset in range((last - cutoff).days + 1)
        for statement in history.partition_ddl(archive, KEY, cutoff + dt.timedelta(days=offset))
    ]
    return steps
