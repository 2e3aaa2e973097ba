"""Read-only numbers about the queues: the dashboard overview and estimated row counts.

Nothing here changes a row (that is :mod:`django_pgqueue.operations`); the statements
live in :mod:`django_pgqueue.sql`. The dashboard, ``pgqueue_status`` and the
Prometheus gauges all read through here, so their cost follows the backlog: live
states are exact (counted through the partial indexes), terminal states are exact
while a table holds at most ``sql.EXACT_TERMINAL_ROWS`` rows and estimated from the
planner's statistics beyond (``QueueStats.estimated``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from django.db import connections, models

from . import sql
from .conf import get_settings
from .models.queue import Status
from .stored_json import readable
from .webhooks.brokers.urls import masked


def estimated_row_count(model: type[models.Model]) -> int | None:
    """The planner's estimate of the rows in ``model``'s table, or None if unknown."""
    alias = get_settings().DATABASE
    with connections[alias].cursor() as cursor:
        cursor.execute(sql.ESTIMATED_ROWS, [model._meta.db_table])
        row = cursor.fetchone()
    if row is None or row[0] is None or row[0] < 0:
        return None
    return int(row[0])


@dataclass
class QueueStats:
    """One line of the dashboard: a queue and its rows by state."""

    name: str
    counts: dict[str, int] = field(default_factory=dict)
    oldest_due_at: datetime | None = None
    lapsed: int = 0
    measured_at: datetime | None = None
    #: Waiting rows claimable now (the other waiting rows are deferred).
    due: int = 0
    #: Terminal counts (succeeded, dead, cancelled) are the planner's estimates.
    estimated: bool = False

    def add(
        self, status: str, count: int, oldest_due: datetime | None, lapsed: int, due: int = 0
    ) -> None:
        """Fold in one (state, count) row of an overview statement."""
        self.counts[status] = count
        self.lapsed += lapsed
        self.due += due
        if oldest_due is not None and (
            self.oldest_due_at is None or oldest_due < self.oldest_due_at
        ):
            self.oldest_due_at = oldest_due

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def in_flight(self) -> int:
        return self.counts.get(Status.IN_PROGRESS, 0)

    @property
    def dead(self) -> int:
        return self.counts.get(Status.DEAD, 0)

    @property
    def deferred(self) -> int:
        """Waiting rows not yet due: ``run_after`` in the future, or a scheduled retry."""
        waiting = self.counts.get(Status.PENDING, 0) + self.counts.get(Status.FAILED, 0)
        return waiting - self.due

    @property
    def oldest_due_age(self) -> timedelta | None:
        """How long the oldest claimable row has been due (how far behind workers are)."""
        if self.oldest_due_at is None or self.measured_at is None:
            return None
        return max(self.measured_at - self.oldest_due_at, timedelta(0))


def job_queue_overview() -> list[QueueStats]:
    """Per queue: counts by state, age of the oldest due job, stuck and dead rows.

    One statement (:data:`django_pgqueue.sql.JOB_OVERVIEW`), pivoted here.
    """
    alias = get_settings().DATABASE
    with connections[alias].cursor() as cursor:
        cursor.execute(sql.JOB_OVERVIEW)
        rows = cursor.fetchall()
    queues: dict[str, QueueStats] = {}
    for queue_name, status, count, oldest_due, lapsed, now, due, estimated in rows:
        stats = queues.setdefault(queue_name, QueueStats(queue_name, measured_at=now))
        stats.add(status, count, oldest_due, lapsed, due)
        stats.estimated = stats.estimated or estimated
    measured = next((q.measured_at for q in queues.values()), None)
    for queue_name, status, count, estimated in history_counts(alias):
        # Beyond EXACT_TERMINAL_ROWS the history is estimated per state only.
        name = queue_name if queue_name is not None else HISTORY_ALL_QUEUES
        stats = queues.setdefault(name, QueueStats(name, measured_at=measured))
        stats.counts[status] = stats.counts.get(status, 0) + count
        stats.estimated = stats.estimated or estimated
    return sorted(queues.values(), key=lambda q: q.name)


#: The dashboard line of a large history's estimated counts (no queue is known).
HISTORY_ALL_QUEUES = "(history, all queues)"


def history_counts(alias: str) -> list[tuple[str | None, str, int, bool]]:
    """Finished jobs in the history (``pgqueue_job_history``) per queue and state:
    exact up to EXACT_TERMINAL_ROWS rows, estimated per state beyond (queue None)."""
    with connections[alias].cursor() as cursor:
        cursor.execute(sql.HISTORY_COUNTS, {"exact": sql.EXACT_TERMINAL_ROWS})
        return [(q, s, int(n), bool(e)) for q, s, n, e in cursor.fetchall()]


@dataclass(frozen=True)
class XminHolder:
    """A session whose snapshot holds back the xmin horizon (vacuum keeps dead rows)."""

    pid: int
    application_name: str
    state: str
    age_seconds: float
    xmin_age: int


def attempt_log_runway() -> tuple[date, date | None] | None:
    """Today (UTC, by the database's clock) and the last day the webhook attempt log
    has a partition for (None: none); None when the log is not partitioned (its
    migration has not run). Attempts of a day without a partition cannot be written:
    the workers' maintenance makes them ``history.PREMADE_DAYS`` ahead."""
    from . import history

    alias = get_settings().DATABASE
    connections[alias].ensure_connection()
    conn = connections[alias].connection
    if not history.is_partitioned(conn, history.ATTEMPT_LOG):
        return None
    (today,) = conn.execute(sql.TODAY_UTC).fetchone()
    days = [p.day for p in history.partitions(conn, history.ATTEMPT_LOG) if p.attached_to]
    return today, max(days, default=None)


def archive_runways() -> list[tuple[str, date, date | None]]:
    """(queue, today, the last day its archive has a partition for) of every message
    queue whose archive is partitioned (``mq.partitions``): a message archived on a
    day without a partition cannot be archived."""
    from . import history
    from .mq import partitions

    alias = get_settings().DATABASE
    connections[alias].ensure_connection()
    conn = connections[alias].connection
    (today,) = conn.execute(sql.TODAY_UTC).fetchone()
    found = []
    for name, _age in partitions.partitioned_archives(conn):
        family = partitions.family(name)
        days = [p.day for p in history.partitions(conn, family) if p.attached_to]
        found.append((name, today, max(days, default=None)))
    return found


def xmin_holders(min_age: float) -> list[XminHolder]:
    """Sessions of the queue database holding a snapshot older than ``min_age`` seconds."""
    with connections[get_settings().DATABASE].cursor() as cursor:
        cursor.execute(sql.XMIN_HOLDERS, {"age": min_age})
        return [
            XminHolder(pid, app or "", state or "", float(age), int(xmin_age or 0))
            for pid, app, state, age, xmin_age in cursor.fetchall()
        ]


@dataclass
class EndpointStats(QueueStats):
    """One webhook endpoint with its deliveries by state: a queue of its own."""

    endpoint_id: int = 0
    is_active: bool = True
    breaker_state: str = "closed"
    open_until: datetime | None = None
    disabled_reason: str = ""
    #: The uid of the endpoint's application (None: a global endpoint).
    application: str | None = None

    @property
    def needs_attention(self) -> bool:
        """Disabled, or its circuit is not closed: its deliveries are not going out."""
        return not self.is_active or self.breaker_state != "closed"


def delivery_overview() -> list[EndpointStats]:
    """Every endpoint with its deliveries by state, in one statement (counted as for jobs)."""
    alias = get_settings().DATABASE
    with connections[alias].cursor() as cursor:
        cursor.execute(sql.DELIVERY_OVERVIEW)
        rows = cursor.fetchall()
    endpoints: dict[int, EndpointStats] = {}
    for (
        endpoint_id, url, is_active, breaker_state, open_until, reason, application,
        status, count, oldest_due, lapsed, now, due, estimated,
    ) in rows:  # fmt: skip
        stats = endpoints.setdefault(
            endpoint_id,
            EndpointStats(
                masked(url),  # a broker URL's password is never shown
                measured_at=now,
                endpoint_id=endpoint_id,
                is_active=is_active,
                breaker_state=breaker_state,
                open_until=open_until,
                disabled_reason=reason,
                application=application,
            ),
        )
        if status is not None:
            stats.add(status, count, oldest_due, lapsed, due)
            stats.estimated = stats.estimated or estimated
    return list(endpoints.values())


@dataclass
class WorkerInfo:
    """One worker process as its heartbeat row describes it."""

    worker_id: str
    host: str
    pid: int
    version: str
    queues: list[str]
    concurrency: int
    started_at: datetime
    last_seen_at: datetime
    measured_at: datetime

    @property
    def silent_for(self) -> timedelta:
        return max(self.measured_at - self.last_seen_at, timedelta(0))

    @property
    def is_gone(self) -> bool:
        """No heartbeat for a whole lease (three beats missed): crashed or cut off."""
        return self.silent_for > timedelta(seconds=get_settings().LEASE_SECONDS)


def _json_list(value: object) -> list[str]:
    """A heartbeat row's queue names, read back (anything may have been written to
    it): names as they are, any other item as its JSON, and a value that is no list
    as one entry saying what it is."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if value is None or value == "":
        return []
    value = readable(value)
    if isinstance(value, list):
        return [item if isinstance(item, str) else json.dumps(item) for item in value]
    shown = value if isinstance(value, str) else json.dumps(value)
    return [f"(stored queues are not a list: {shown[:80]})"]


def worker_overview() -> list[WorkerInfo]:
    """Every worker with a heartbeat row, newest first (gone ones until pruned)."""
    alias = get_settings().DATABASE
    with connections[alias].cursor() as cursor:
        cursor.execute(sql.WORKERS)
        rows = cursor.fetchall()
    # Django's cursors return jsonb as text (JSONField decodes it); the statement is raw.
    return [
        WorkerInfo(w, host, pid, version, _json_list(queues), *rest)
        for w, host, pid, version, queues, *rest in rows
    ]
