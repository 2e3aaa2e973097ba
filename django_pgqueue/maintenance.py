"""Retention: delete old terminal rows in short batches (``manage.py pgqueue_prune``).

Jobs and webhook deliveries in ``succeeded``, ``cancelled`` or ``dead`` are
deleted once older than their state's retention (``PGQUEUE["RETENTION"]``,
measured from ``finished_at``, or ``updated_at`` for rows that never finished).
The dead-letter queue (``dead``) is kept unless a retention is configured for it
or the caller asks (``include_dead``). A delivery's attempt log goes with it, and
events go once none of their deliveries is left.

Workflows (and their edges) older than the ``succeeded`` retention go once none of
their steps is left in the job table.

The console's rollup minutes older than ``PGQUEUE["ROLLUP_RETENTION_SECONDS"]``
go too, in one statement of the rollup store (they are a row per name and minute).

Every batch is its own short autocommit transaction: pruning never holds locks
that workers or enqueues wait on, and can be interrupted at any point.

Finished jobs the workers moved to history (history.py) go a whole partition at a
time: a day partition of a state is detached concurrently and dropped once its
whole day is past that state's retention, which writes no WAL per row. Only rows
still in the live tables are deleted row by row. The webhook attempt log goes the
same way, a day partition at a time, once its day is older than
``PGQUEUE["ATTEMPT_RETENTION_SECONDS"]``, whatever its deliveries' states.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from . import history, sql
from .conf import get_settings
from .db import connect
from .mq import partitions as mq_partitions
from .rollup import store as rollup_store
from .workflows import store as workflow_store

#: Rows examined (and at most deleted) per batch.
DEFAULT_BATCH_SIZE = 1000
#: Dead-letter retention used by ``include_dead`` when none is configured.
DEFAULT_DEAD_RETENTION = 30 * 24 * 3600.0


@dataclass
class PruneReport:
    """What a prune deleted (or, with ``dry_run``, would delete), per table and state."""

    dry_run: bool
    retention: dict[str, float]
    deleted: dict[str, dict[str, int]] = field(default_factory=dict)
    batches: int = 0
    #: History partitions dropped (or, with ``dry_run``, that would be).
    partitions_dropped: list[str] = field(default_factory=list)
    #: Day partitions made ahead (``make_partitions``), not with ``dry_run``.
    partitions_made: int = 0

    def add(self, table: str, status: str, count: int) -> None:
        per_state = self.deleted.setdefault(table, {})
        per_state[status] = per_state.get(status, 0) + count

    def total(self, table: str | None = None) -> int:
        tables = [table] if table else list(self.deleted)
        return sum(sum(self.deleted.get(t, {}).values()) for t in tables)


def retention_plan(
    *, include_dead: bool = False, dead_seconds: float | None = None
) -> dict[str, float]:
    """The states to prune and their ages in seconds (states kept forever are left out)."""
    plan = {
        state: age
        for state, age in get_settings().RETENTION.items()
        if age is not None and state != "dead"
    }
    dead = get_settings().RETENTION.get("dead")
    if dead_seconds is not None:
        dead = dead_seconds
    elif dead is None and include_dead:
        dead = DEFAULT_DEAD_RETENTION
    if dead is not None:
        plan["dead"] = float(dead)
    return plan


def _webhook_tables_exist(conn: Any) -> bool:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (sql.DELIVERY_TABLE,)).fetchone()
    return bool(row[0])


def _history_exists(conn: Any) -> bool:
    row = conn.execute(sql.RELATION_EXISTS, (sql.HISTORY_TABLE,)).fetchone()
    return bool(row[0])


def prune(
    *,
    dry_run: bool = False,
    include_dead: bool = False,
    dead_seconds: float | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    pause: float = 0.0,
    alias: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> PruneReport:
    """Delete (or count, with ``dry_run``) every terminal row past its retention."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be 1 or more, got {batch_size}")
    plan = retention_plan(include_dead=include_dead, dead_seconds=dead_seconds)
    report = PruneReport(dry_run=dry_run, retention=plan)
    with connect("prune", alias=alias, prepare=True) as conn:
        if not dry_run:
            age = get_settings().ROLLUP_RETENTION_SECONDS
            report.add(sql.ROLLUP_TABLE, "older", rollup_store.prune(conn, age))
        if not dry_run:
            report.partitions_made = make_partitions(conn)
        # Before the deliveries: those pruned below then have fewer attempts to delete.
        _drop_attempt_log(conn, dry_run, report, progress)
        _drop_archives(conn, dry_run, report, progress)
    if not plan:
        return report
    params = {"states": list(plan), "ages": list(plan.values())}
    with connect("prune", alias=alias, prepare=True) as conn:
        tables = [(sql.JOB_TABLE, sql.PRUNE_JOBS)]
        webhooks = _webhook_tables_exist(conn)
        if webhooks:
            tables.append((sql.DELIVERY_TABLE, sql.PRUNE_DELIVERIES))
        for table, delete in tables:
            if dry_run:
                for status, count in conn.execute(sql.prune_count(table), params).fetchall():
                    report.add(table, status, count)
                continue
            _prune_table(conn, table, delete, params, batch_size, pause, report, progress)
        if _history_exists(conn):
            dropped = history.drop_expired(conn, plan, dry_run=dry_run, progress=progress)
            for status, count in dropped.by_state.items():
                report.add(sql.HISTORY_TABLE, status, count)
            report.partitions_dropped = sorted([*report.partitions_dropped, *dropped.dropped])
        event_age = plan.get("succeeded")
        if webhooks and event_age is not None:
            if dry_run:
                # A COUNT(*) always returns its one row.
                (count,) = cast(
                    "tuple[int]",
                    conn.execute(sql.PRUNE_COUNT_EVENTS, {"age": event_age}).fetchone(),
                )
                report.add(sql.EVENT_TABLE, "orphaned", count)
            else:
                while True:
                    cur = conn.execute(sql.PRUNE_EVENTS, {"age": event_age, "limit": batch_size})
                    report.batches += 1
                    report.add(sql.EVENT_TABLE, "orphaned", cur.rowcount)
                    if cur.rowcount < batch_size:
                        break
                    if pause:
                        time.sleep(pause)
        if event_age is not None:
            # A workflow's row and edges go with its last step (the same age as events).
            workflows, edges = workflow_store.prune(
                conn, event_age, batch_size, dry_run=dry_run, pause=pause
            )
            report.add(sql.WORKFLOW_TABLE, "finished", workflows)
            report.add(sql.EDGE_TABLE, "finished", edges)
        _prune_key_rates(conn, dry_run, batch_size, report)
    return report


def make_partitions(conn: Any) -> int:
    """The day partitions ahead that the workers' maintenance makes (the job
    history's, the attempt log's, the partitioned message archives'), made here too
    so that a ``pgqueue_prune`` run daily keeps them made where no worker runs (a
    database used only through the SQL API, say). Each is made under the
    maintenance lock: while a worker holds it, that worker makes them."""
    made = history.ensure_premade(conn) if _history_exists(conn) else 0
    return made + mq_partitions.maintain(conn, retention=False).partitions_made


def _drop_attempt_log(
    conn: Any, dry_run: bool, report: PruneReport, progress: Callable[[str], None] | None
) -> None:
    """The webhook attempt log's day partitions older than ATTEMPT_RETENTION_SECONDS."""
    age = get_settings().ATTEMPT_RETENTION_SECONDS
    if age is None or not history.is_partitioned(conn, history.ATTEMPT_LOG):
        return
    dropped = history.drop_expired(
        conn, {"attempts": age}, dry_run=dry_run, progress=progress, family=history.ATTEMPT_LOG
    )
    report.add(sql.ATTEMPT_TABLE, "older", sum(dropped.dropped.values()))
    report.partitions_dropped = sorted([*report.partitions_dropped, *dropped.dropped])


def _drop_archives(
    conn: Any, dry_run: bool, report: PruneReport, progress: Callable[[str], None] | None
) -> None:
    """The day partitions of the partitioned message archives older than their queue's
    ``archive_retention`` (``mq.partitions``)."""
    dropped = mq_partitions.drop_expired(conn, dry_run=dry_run, progress=progress)
    for queue, rows in dropped.by_queue.items():
        report.add(mq_partitions.family(queue).table, "older", rows)
    report.partitions_dropped = sorted([*report.partitions_dropped, *dropped.dropped])


def _prune_key_rates(conn: Any, dry_run: bool, batch_size: int, report: PruneReport) -> None:
    """Delete the per-key rate rows whose bucket is full again (flow control): they
    hold nothing a missing row does not, and a key seen once must not stay forever."""
    if dry_run:
        (count,) = cast("tuple[int]", conn.execute(sql.PRUNE_COUNT_QUEUE_KEY_RATES).fetchone())
        report.add(sql.QUEUE_KEY_RATE_TABLE, "full", count)
        return
    while True:
        cur = conn.execute(sql.PRUNE_QUEUE_KEY_RATES, {"limit": batch_size})
        report.batches += 1
        report.add(sql.QUEUE_KEY_RATE_TABLE, "full", cur.rowcount)
        if cur.rowcount < batch_size:
            return


def _prune_table(
    conn: Any,
    table: str,
    delete: str,
    params: dict[str, Any],
    batch_size: int,
    pause: float,
    report: PruneReport,
    progress: Callable[[str], None] | None,
) -> None:
    after = 0
    candidates = sql.prune_candidates(table)
    while True:
        ids, last = conn.execute(
            candidates, {**params, "after": after, "scan": batch_size}
        ).fetchone()
        if last is None:
            return  # walked past the last row
        after = last
        if not ids:
            continue
        for (status,) in conn.execute(delete, {**params, "ids": ids}).fetchall():
            report.add(table, status, 1)
        report.batches += 1
        if progress is not None:
            progress(f"{table}: {report.total(table)} deleted so far (up to id {after})")
        if pause:
            time.sleep(pause)
