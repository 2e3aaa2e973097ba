"""Job history: finished jobs leave ``pgqueue_job`` for a partitioned table.

The writer of ``pgqueue_job_history`` (with replay's restore in operations.py) and
of its partitions:

* :func:`move_finished`: the mover. Finished jobs older than
  ``PGQUEUE["HISTORY_DELAY_SECONDS"]`` go, a batch per statement
  (``sql.move_jobs``: ``DELETE ... RETURNING`` into ``INSERT``), so the live table
  holds the backlog and the last moments of history only.
* :func:`move_back`: the way back to one table, every history row returned to
  ``pgqueue_job`` in one statement.
* :func:`ensure_partitions`: the day partitions of every terminal state, made
  ahead (``PREMADE_DAYS``), and any past day a moved row needs.
* :func:`drop_expired`: retention by whole partitions (``DETACH ... CONCURRENTLY``
  then ``DROP``), for ``pgqueue_prune`` and, with
  ``PGQUEUE["MAINTENANCE_RETENTION"]``, the workers.
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

#: Days of partitions made ahead of today (UTC), for every terminal state.
PREMADE_DAYS = 3
#: Rows moved per statement.
MOVE_BATCH_SIZE = 1000
#: Times in a row the mover makes missing partitions for one batch before it gives up
#: the pass.
MISSING_PARTITION_ROUNDS = 3

_PARTITION_NAME = re.compile(sql.HISTORY_PARTITION_PATTERN)


def job_columns() -> list[str]:
    """Every column of ``pgqueue_job``, in the model's order (the history has the same)."""
    from .models import Job

    return [str(f.column) for f in Job._meta.concrete_fields]


def partition_name(state: str, day: dt.date) -> str:
    """The partition of ``state``'s finished jobs of ``day``."""
    return f"{sql.HISTORY_TABLE}_{state}_p{day:%Y%m%d}"


@dataclass(frozen=True)
class Partition:
    """One day partition of one state, as the catalogue has it."""

    name: str
    state: str
    day: dt.date
    attached_to: str | None  #: its state table, None once detached
    detach_pending: bool
    estimated_rows: int

    @property
    def end(self) -> dt.datetime:
        """The partition's upper bound: the next UTC midnight."""
        return dt.datetime.combine(self.day + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)


def partitions(conn: Any) -> list[Partition]:
    """Every day partition of the history, attached or left detached."""
    found = []
    for name, parent, pending, rows in conn.execute(sql.HISTORY_PARTITIONS).fetchall():
        match = _PARTITION_NAME.match(name)
        if match is None:  # pragma: no cover - the statement filters by the same pattern
            continue
        day = dt.datetime.strptime(match["day"], "%Y%m%d").date()
        found.append(Partition(name, match["state"], day, parent, bool(pending), int(rows)))
    return found


def _ddl(conn: Any, template: str, **parts: Any) -> None:
    """Run one DDL statement of maintenance in its own transaction, with a lock timeout."""
    statement = pgsql.SQL(template).format(**parts)
    with conn.transaction():
        conn.execute(sql.DDL_LOCK_TIMEOUT)
        conn.execute(statement)


def create_partition(conn: Any, state: str, day: dt.date) -> bool:
    """Make (if missing) and attach ``state``'s partition of ``day``, under the
    maintenance lock; False when another worker holds the lock (it makes them)."""
    name = partition_name(state, day)
    start = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
    end = start + dt.timedelta(days=1)
    with conn.transaction():
        if not _locked(conn):
            return False
        conn.execute(sql.DDL_LOCK_TIMEOUT)
        if conn.execute(sql.RELATION_EXISTS, (name,)).fetchone()[0]:
            return True
        conn.execute(
            pgsql.SQL(sql.CREATE_PARTITION).format(
                partition=pgsql.Identifier(name), parent=pgsql.Identifier(sql.HISTORY_TABLE)
            )
        )
        conn.execute(
            pgsql.SQL(sql.ATTACH_PARTITION).format(
                state_table=pgsql.Identifier(f"{sql.HISTORY_TABLE}_{state}"),
                partition=pgsql.Identifier(name),
                start=pgsql.Literal(start.isoformat()),
                end=pgsql.Literal(end.isoformat()),
            )
        )
    logger.debug("History partition %s created", name)  # the maintenance line counts them
    return True


def _locked(conn: Any) -> bool:
    """Take the maintenance lock for the current transaction, if free."""
    return bool(conn.execute(sql.TRY_MAINTENANCE_LOCK, (sql.MAINTENANCE_LOCK_KEY,)).fetchone()[0])


def ensure_partitions(conn: Any, days_ahead: int = PREMADE_DAYS) -> int:
    """Make today's partitions and ``days_ahead`` more for every terminal state;
    return how many were made."""
    (today,) = conn.execute(sql.TODAY_UTC).fetchone()
    have = {p.name for p in partitions(conn) if p.attached_to}
    made = 0
    for offset in range(days_ahead + 1):
        day = today + dt.timedelta(days=offset)
        for state in _states():
            if partition_name(state, day) not in have and create_partition(conn, state, day):
                made += 1
    return made


def _states() -> list[str]:
    return [t.removeprefix(sql.HISTORY_TABLE + "_") for t in sql.HISTORY_STATE_TABLES]


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
) -> DropReport:
    """Drop every history partition wholly older than its state's retention in
    ``plan`` (state -> seconds), and any partition an interrupted run left detached.

    A partition goes only when its whole day is past the retention: a row is never
    dropped early, and rows a little past it wait for their day to end.
    """
    report = DropReport()
    (now,) = conn.execute(sql.DB_NOW).fetchone()
    for part in partitions(conn):
        age = plan.get(part.state)
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
            state_table = pgsql.Identifier(f"{sql.HISTORY_TABLE}_{part.state}")
            if part.detach_pending:
                _ddl(conn, sql.FINALIZE_DETACH, state_table=state_table, partition=ident)
            elif not leftover:
                # Not in a transaction block: CONCURRENTLY runs its own two.
                conn.execute(
                    pgsql.SQL(sql.DETACH_PARTITION).format(state_table=state_table, partition=ident)
                )
            _ddl(conn, sql.DROP_PARTITION, partition=ident)
            if progress is not None:
                progress(f"{part.name}: dropped (about {rows} rows)")
        report.dropped[part.name] = rows
        report.by_state[part.state] = report.by_state.get(part.state, 0) + rows
    return report


@dataclass
class MaintenanceReport:
    """One maintenance pass."""

    partitions_made: int = 0
    moved: MoveReport = field(default_factory=MoveReport)
    dropped: DropReport | None = None
    seconds: float = 0.0


def maintain(
    conn: Any,
    *,
    retention: dict[str, float] | None = None,
    stopping: Callable[[], bool] = lambda: False,
) -> MaintenanceReport:
    """One pass of the workers' maintenance: premade partitions, the mover and, given
    a ``retention`` plan (``maintenance.retention_plan``), retention by partitions."""
    started = time.monotonic()
    report = MaintenanceReport()
    with conn.transaction():
        locked = _locked(conn)  # a hint only: each step takes the lock again
    if locked:
        report.partitions_made = ensure_partitions(conn)
    report.moved = move_finished(conn, stopping=stopping)
    report.partitions_made += report.moved.partitions_made
    if retention and locked and not stopping():
        report.dropped = drop_expired(conn, retention)
    report.seconds = time.monotonic() - started
    return report
