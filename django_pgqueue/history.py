"""Job history: finished jobs leave ``pgqueue_job`` for a partitioned table; and
the day partitions of the webhook attempt log.

The writer of ``pgqueue_job_history`` (with replay's restore in operations.py) and
of its partitions:

* :func:`move_finished`: the mover. Finished jobs older than
  ``PGQUEUE["HISTORY_DELAY_SECONDS"]`` go, a batch per statement
  (``sql.move_jobs``: ``DELETE ... RETURNING`` into ``INSERT``), so the live table
  holds the backlog and the last moments of history only.
* :func:`move_back`: the way back to one table, every history row returned to
  ``pgqueue_job`` in one statement.
* :func:`ensure_partitions`: the day partitions of every terminal state, made
  ahead (``PREMADE_DAYS``), and any past day a moved row needs; the same for the
  webhook attempt log (:data:`ATTEMPT_LOG`), partitioned by day by its migration.
* :func:`drop_expired`: retention by whole partitions (``DETACH ... CONCURRENTLY``
  then ``DROP``), for ``pgqueue_prune`` and, with
  ``PGQUEUE["MAINTENANCE_RETENTION"]``, the workers; of the job history by state,
  of the attempt log by ``PGQUEUE["ATTEMPT_RETENTION_SECONDS"]``.
* :func:`maintain`: one maintenance pass, run by every worker process every
  ``PGQUEUE["MAINTENANCE_INTERVAL"]`` seconds (``worker/housekeeping.py``). No
  leader: each step runs in a short transaction under a transaction-level
  advisory lock, so one worker at a time does it and the others skip.

Every connection here is an autocommit psycopg connection (``db.connect``).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql as pgsql

from . import sql
from .conf import get_settings

logger = logging.getLogger("django_pgqueue.history")

#: Days of partitions made ahead of today (UTC), for every terminal state and the
#: attempt log.
PREMADE_DAYS = 3
#: Rows moved per statement.
MOVE_BATCH_SIZE = 1000
#: Times in a row the mover makes missing partitions for one batch before it gives up
#: the pass.
MISSING_PARTITION_ROUNDS = 3


def job_columns() -> list[str]:
    """Every column of ``pgqueue_job``, in the model's order (the history has the same)."""
    from .models import Job

    return [str(f.column) for f in Job._meta.concrete_fields]


@dataclass(frozen=True)
class Family:
    """A table whose rows live in UTC day partitions that maintenance makes ahead and
    retention drops whole: the job history (a parent per terminal state) and the
    webhook attempt log (one parent).

    ``keys`` are what retention plans name (a state, or ``"attempts"``); a
    partition's parent is ``parent_format`` and its name ``name_format``, with the
    key and the day filled in. ``pattern`` matches the names, with a ``day`` group
    and, where the key is in the name, a ``key`` group.
    """

    table: str  #: the partitioned table that reads and writes name
    keys: tuple[str, ...]
    parent_format: str
    name_format: str
    pattern: str

    def name(self, key: str, day: dt.date) -> str:
        return self.name_format.format(table=self.table, key=key, day=day)

    def parent(self, key: str) -> str:
        return self.parent_format.format(table=self.table, key=key)

    @property
    def regex(self) -> str:
        """``pattern`` as a PostgreSQL regular expression (no named groups)."""
        return re.sub(r"\(\?P<[a-z]+>", "(", self.pattern)


JOB_HISTORY = Family(
    table=sql.HISTORY_TABLE,
    keys=tuple(t.removeprefix(sql.HISTORY_TABLE + "_") for t in sql.HISTORY_STATE_TABLES),
    parent_format="{table}_{key}",
    name_format="{table}_{key}_p{day:%Y%m%d}",
    pattern=sql.HISTORY_PARTITION_PATTERN,
)
#: The webhook attempt log (``pgqueue_delivery_attempt``), partitioned by day of
#: ``created_at`` by its migration; retention: ``PGQUEUE["ATTEMPT_RETENTION_SECONDS"]``.
ATTEMPT_LOG = Family(
    table=sql.ATTEMPT_TABLE,
    keys=("attempts",),
    parent_format="{table}",
    name_format="{table}_p{day:%Y%m%d}",
    pattern=sql.ATTEMPT_PARTITION_PATTERN,
)


def partition_name(state: str, day: dt.date) -> str:
    """The partition of ``state``'s finished jobs of ``day``."""
    return JOB_HISTORY.name(state, day)


@dataclass(frozen=True)
class Partition:
    """One day partition of a family, as the catalogue has it."""

    name: str
    key: str  #: the job state, or "attempts"
    day: dt.date
    attached_to: str | None  #: its parent, None once detached
    detach_pending: bool
    estimated_rows: int
    #: Holds every day up to its own (the attempt log's first partition).
    from_minvalue: bool = False

    def covers(self, day: dt.date) -> bool:
        return day == self.day or (self.from_minvalue and day < self.day)

    @property
    def end(self) -> dt.datetime:
        """The partition's upper bound: the next UTC midnight."""
        return dt.datetime.combine(self.day + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)


def partitions(conn: Any, family: Family = JOB_HISTORY) -> list[Partition]:
    """Every day partition of ``family``, attached or left detached."""
    found = []
    pattern = re.compile(family.pattern)
    params = {"table": quoted(family.table), "regex": family.regex}
    for name, parent, pending, rows, unbounded in conn.execute(
        sql.DAY_PARTITIONS, params
    ).fetchall():
        match = pattern.match(name)
        if match is None:  # pragma: no cover - the statement filters by the same pattern
            continue
        day = dt.datetime.strptime(match["day"], "%Y%m%d").date()
        key = match.groupdict().get("key") or family.keys[0]
        found.append(Partition(name, key, day, parent, bool(pending), int(rows), bool(unbounded)))
    return found


def is_partitioned(conn: Any, family: Family) -> bool:
    """Whether ``family``'s table exists and is partitioned (its migration ran)."""
    return bool(conn.execute(sql.IS_PARTITIONED, (quoted(family.table),)).fetchone()[0])


def quoted(name: str) -> str:
    """``name`` as a quoted identifier, for ``to_regclass``: a message queue's archive
    may have capitals, ``-`` or ``@`` in its name."""
    return pgsql.Identifier(name).as_string(None)


def _ddl(conn: Any, template: str, **parts: Any) -> None:
    """Run one DDL statement of maintenance in its own transaction, with a lock timeout."""
    statement = pgsql.SQL(template).format(**parts)
    with conn.transaction():
        conn.execute(sql.DDL_LOCK_TIMEOUT)
        conn.execute(statement)


def create_partition(conn: Any, key: str, day: dt.date, family: Family = JOB_HISTORY) -> bool:
    """Make (if missing) and attach ``family``'s partition of ``key`` and ``day``,
    under the maintenance lock; False when another worker holds the lock (it makes
    them)."""
    name = family.name(key, day)
    with conn.transaction():
        if not _locked(conn):
            return False
        conn.execute(sql.DDL_LOCK_TIMEOUT)
        if conn.execute(sql.RELATION_EXISTS, (quoted(name),)).fetchone()[0]:
            return True
        for statement in partition_ddl(family, key, day):
            conn.execute(statement)
    logger.debug("Partition %s created", name)  # the maintenance line counts them
    return True


def partition_ddl(family: Family, key: str, day: dt.date) -> list[pgsql.Composed]:
    """The statements that make ``family``'s partition of ``key`` and ``day`` (the UTC
    day's bounds): an empty table like the parent, then attached."""
    name = pgsql.Identifier(family.name(key, day))
    start = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
    end = start + dt.timedelta(days=1)
    return [
        pgsql.SQL(sql.CREATE_PARTITION).format(
            partition=name, parent=pgsql.Identifier(family.table)
        ),
        pgsql.SQL(sql.ATTACH_PARTITION).format(
            parent=pgsql.Identifier(family.parent(key)),
            partition=name,
            start=pgsql.Literal(start.isoformat()),
            end=pgsql.Literal(end.isoformat()),
        ),
    ]


def _locked(conn: Any) -> bool:
    """Take the maintenance lock for the current transaction, if free."""
    return bool(conn.execute(sql.TRY_MAINTENANCE_LOCK, (sql.MAINTENANCE_LOCK_KEY,)).fetchone()[0])


def ensure_partitions(
    conn: Any, days_ahead: int = PREMADE_DAYS, family: Family = JOB_HISTORY
) -> int:
    """Make today's partitions and ``days_ahead`` more for every key of ``family``;
    return how many were made."""
    (today,) = conn.execute(sql.TODAY_UTC).fetchone()
    have = [p for p in partitions(conn, family) if p.attached_to]
    made = 0
    for offset in range(days_ahead + 1):
        day = today + dt.timedelta(days=offset)
        for key in family.keys:
            if any(p.key == key and p.covers(day) for p in have):
                continue
            made += create_partition(conn, key, day, family)
    return made


def ensure_premade(conn: Any) -> int:
    """The partitions ahead of the job history and, once its migration ran, of the
    attempt log (the workers' maintenance and ``pgqueue_prune``); how many were made."""
    made = ensure_partitions(conn)
    if is_partitioned(conn, ATTEMPT_LOG):
        made += ensure_partitions(conn, family=ATTEMPT_LOG)
    return made


@dataclass
class MoveReport:
    """What one run of the mover did."""

    moved: int = 0
    batches: int = 0
    partitions_made: int = 0
    skipped: bool = False  #: another worker held the maintenance lock


def move_finished(
    conn: Any,
    *,
    delay: float | None = None,
    batch_size: int = MOVE_BATCH_SIZE,
    max_batches: int | None = None,
    stopping: Callable[[], bool] = lambda: False,
) -> MoveReport:
    """Move finished jobs older than ``delay`` seconds (``HISTORY_DELAY_SECONDS``) to
    history, a batch per transaction, until a batch comes back short.

    Each batch runs under the maintenance lock: when another worker holds it, this
    one stops (``skipped``). A batch that needs a day without a partition fails
    whole, the days it needs are made, and it runs again.
    """
    report = MoveReport()
    if delay is None:
        delay = get_settings().HISTORY_DELAY_SECONDS
    if delay is None:
        return report
    statement = sql.move_jobs(job_columns())
    params = {"delay": float(delay), "limit": batch_size}
    rounds = 0
    while not stopping() and (max_batches is None or report.batches < max_batches):
        try:
            with conn.transaction():
                if not _locked(conn):
                    report.skipped = True
                    return report
                moved = conn.execute(statement, params).rowcount
        except psycopg.errors.CheckViolation as exc:
            # "no partition of relation ... found for row": nothing moved.
            if "partition" not in str(exc) or rounds >= MISSING_PARTITION_ROUNDS:
                raise
            rounds += 1
            for state, day in conn.execute(sql.NEXT_BATCH_DAYS, params).fetchall():
                report.partitions_made += create_partition(conn, state, day)
            continue
        rounds = 0
        report.batches += 1
        report.moved += moved
        if moved < batch_size:
            break
    return report


def move_back(conn: Any) -> int:
    """Return every history row to ``pgqueue_job``, in one statement; how many.

    The way back to one table (docs/operations.md, "Upgrading and rolling back"):
    stop the workers and set ``HISTORY_DELAY_SECONDS = None`` first, or the mover
    files the rows again. A large history makes this one long transaction: prune it
    first. The partitions stay, empty, for retention to drop.
    """
    return int(conn.execute(sql.move_back(job_columns())).rowcount)


@dataclass
class DropReport:
    """What retention by partitions did (or, with ``dry_run``, would do)."""

    dropped: dict[str, int] = field(default_factory=dict)  #: partition -> rows
    by_state: dict[str, int] = field(default_factory=dict)


def drop_expired(
    conn: Any,
    plan: dict[str, float],
    *,
    dry_run: bool = False,
    progress: Callable[[str], None] | None = None,
    family: Family = JOB_HISTORY,
    now: dt.datetime | None = None,
) -> DropReport:
    """Drop every partition of ``family`` wholly older than its key's retention in
    ``plan`` (a state, or "attempts", -> seconds), and any partition an interrupted
    run left detached.

    A partition goes only when its whole day is past the retention: a row is never
    dropped early, and rows a little past it wait for their day to end. Ages are
    measured from ``now``, the database's clock unless given.
    """
    report = DropReport()
    if now is None:
        (now,) = conn.execute(sql.DB_NOW).fetchone()
    for part in partitions(conn, family):
        age = plan.get(part.key)
        leftover = part.attached_to is None  # detached by a run that was interrupted
        if not leftover and (age is None or part.end > now - dt.timedelta(seconds=age)):
            continue
        ident = pgsql.Identifier(part.name)
        if dry_run:
            (rows,) = conn.execute(
                pgsql.SQL(sql.COUNT_PARTITION).format(partition=ident)
            ).fetchone()
        else:
            rows = max(part.estimated_rows, 0)
            parent = pgsql.Identifier(family.parent(part.key))
            if part.detach_pending:
                _ddl(conn, sql.FINALIZE_DETACH, parent=parent, partition=ident)
            elif not leftover:
                # Not in a transaction block: CONCURRENTLY runs its own two.
                conn.execute(pgsql.SQL(sql.DETACH_PARTITION).format(parent=parent, partition=ident))
            _ddl(conn, sql.DROP_PARTITION, partition=ident)
            if progress is not None:
                progress(f"{part.name}: dropped (about {rows} rows)")
        report.dropped[part.name] = rows
        report.by_state[part.key] = report.by_state.get(part.key, 0) + rows
    return report


@dataclass
class MaintenanceReport:
    """One maintenance pass."""

    partitions_made: int = 0
    #: This worker held the maintenance lock at the start of the pass (only it makes
    #: and drops partitions; the others still move finished jobs).
    locked: bool = False
    moved: MoveReport = field(default_factory=MoveReport)
    dropped: DropReport | None = None
    #: The attempt log's partitions dropped (``attempt_retention``).
    attempts_dropped: DropReport | None = None
    seconds: float = 0.0


def maintain(
    conn: Any,
    *,
    retention: dict[str, float] | None = None,
    attempt_retention: float | None = None,
    stopping: Callable[[], bool] = lambda: False,
) -> MaintenanceReport:
    """One pass of the workers' maintenance: premade partitions (the job history's and
    the attempt log's), the mover and, given a ``retention`` plan
    (``maintenance.retention_plan``) or an ``attempt_retention`` in seconds, retention
    by partitions."""
    started = time.monotonic()
    report = MaintenanceReport()
    with conn.transaction():
        locked = report.locked = _locked(conn)  # a hint only: each step takes it again
    # Only the worker holding the lock makes and drops partitions.
    attempt_log = locked and is_partitioned(conn, ATTEMPT_LOG)
    if locked:
        report.partitions_made = ensure_premade(conn)
    report.moved = move_finished(conn, stopping=stopping)
    report.partitions_made += report.moved.partitions_made
    if retention and locked and not stopping():
        report.dropped = drop_expired(conn, retention)
    if attempt_retention is not None and attempt_log and not stopping():
        report.attempts_dropped = drop_expired(
            conn, {"attempts": attempt_retention}, family=ATTEMPT_LOG
        )
    report.seconds = time.monotonic() - started
    return report
