"""A snapshot of the queues for ``manage.py pgqueue_status``: as a dict with stable
field names (``--json``, documented in docs/commands.md), as text, and judged against
thresholds for cron, Nagios or a Kubernetes probe.

Three read-only statements (the dashboard's two overviews and the worker list), and
one per message queue (``mq.store.overview``); no row is changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from .mq import store as mq_store
from .queues import list_queues
from .stats import (
    EndpointStats,
    QueueStats,
    WorkerInfo,
    XminHolder,
    archive_runways,
    attempt_log_runway,
    delivery_overview,
    job_queue_overview,
    worker_overview,
    xmin_holders,
)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: str) -> float:
    """``"90"``, ``"90s"``, ``"5m"``, ``"1.5h"``, ``"2d"`` -> seconds; ValueError otherwise."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"expected a duration such as 60s, 5m or 1h, got {text!r}")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


#: Default age after which a session pinning the xmin horizon is reported.
XMIN_WARNING_SECONDS = 300.0


@dataclass(frozen=True)
class Thresholds:
    """Limits that make the status "not ok"; None means no limit."""

    max_oldest_due: float | None = None
    max_dead: int | None = None
    max_lapsed: int | None = None
    min_workers: int | None = None
    #: A session holding back the xmin horizon longer than this is reported
    #: (a warning; with ``--max-xmin-age``, a problem too).
    xmin_warning_age: float = XMIN_WARNING_SECONDS
    max_xmin_age: float | None = None


def _seconds(value: Any) -> float | None:
    return None if value is None else round(value.total_seconds(), 3)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _queue_fields(stats: QueueStats) -> dict[str, Any]:
    return {
        "waiting": stats.counts.get("waiting", 0),
        "due": stats.due,
        "deferred": stats.deferred,
        "in_progress": stats.in_flight - stats.lapsed,
        "lapsed": stats.lapsed,
        "oldest_due_seconds": _seconds(stats.oldest_due_age),
        "dead": stats.dead,
        "succeeded": stats.counts.get("succeeded", 0),
        "cancelled": stats.counts.get("cancelled", 0),
        "estimated": stats.estimated,
    }


def _endpoint(stats: EndpointStats) -> dict[str, Any]:
    return {
        "id": stats.endpoint_id,
        "url": stats.name,
        "application": stats.application,
        "is_active": stats.is_active,
        "breaker_state": stats.breaker_state,
        "open_until": _iso(stats.open_until),
        "disabled_reason": stats.disabled_reason,
        **_queue_fields(stats),
    }


def _worker(info: WorkerInfo) -> dict[str, Any]:
    return {
        "worker_id": info.worker_id,
        "host": info.host,
        "pid": info.pid,
        "version": info.version,
        "queues": info.queues,
        "concurrency": info.concurrency,
        "started_at": _iso(info.started_at),
        "last_seen_at": _iso(info.last_seen_at),
        "seconds_since_seen": _seconds(info.silent_for),
        "alive": not info.is_gone,
    }


def _message_queue(stats: mq_store.QueueStatus) -> dict[str, Any]:
    return {
        "name": stats.name,
        "messages": stats.messages,
        "visible": stats.visible,
        "in_flight": stats.in_flight,
        "delayed": stats.delayed,
        "oldest_seconds": _round(stats.oldest_seconds),
        "oldest_visible_seconds": _round(stats.oldest_visible_seconds),
        "dead_letter": stats.dead_letter,
        "dead_letters": stats.dead_letters,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def snapshot(thresholds: Thresholds | None = None) -> dict[str, Any]:
    """The status as plain data (the ``--json`` document), with ``problems`` and ``ok``."""
    queues = job_queue_overview()
    endpoints = delivery_overview()
    workers = worker_overview()
    left_out: list[str] = []
    message_queues = mq_store.overview(left_out)
    measured = next((s.measured_at for s in [*queues, *endpoints] if s.measured_at), None)
    if measured is None and workers:
        measured = workers[0].measured_at
    data: dict[str, Any] = {
        "measured_at": _iso(measured),
        "queues": [{"name": s.name, **_queue_fields(s)} for s in queues],
        "endpoints": [_endpoint(s) for s in endpoints],
        "workers": [_worker(w) for w in workers],
        "message_queues": [_message_queue(q) for q in message_queues],
        # Flow control (docs/flow-control.md): the queues an operator paused.
        "paused_queues": [
            {"name": q.name, "paused_at": _iso(q.paused_at)} for q in list_queues() if q.paused
        ],
    }
    limits = thresholds or Thresholds()
    data["xmin_holders"] = [_xmin_holder(h) for h in xmin_holders(limits.xmin_warning_age)]
    data["warnings"] = [_xmin_warning(h) for h in data["xmin_holders"]] + left_out
    runway = attempt_log_runway()
    data["attempt_log_partitioned_through"] = _iso_day(runway[1]) if runway else None
    data["problems"] = problems(data, limits)
    runways = [
        (ATTEMPT_LOG_RUNWAY, *runway) if runway else None,
        *((_archive_runway(name), today, last) for name, today, last in archive_runways()),
    ]
    for what, today, last in filter(None, runways):
        if last is None or last <= today:  # runs out today: a warning
            data["warnings"].append(_runway_warning(what, today, last))
        if last is None or last < today:  # today has none: a problem
            data["problems"].append(_runway_warning(what, today, last))
    data["ok"] = not data["problems"]
    return data


#: What runs out with the attempt log's partitions, and what an archive's stops.
ATTEMPT_LOG_RUNWAY = (
    "the webhook attempt log",
    "attempts of a later day cannot be written, so webhook deliveries fail",
)


def _archive_runway(queue: str) -> tuple[str, str]:
    return (
        f"the archive of message queue {queue!r}",
        "messages cannot be archived on a later day, so archive() fails there",
    )


def _iso_day(day: date | None) -> str | None:
    return day.isoformat() if day else None


def _runway_warning(what: tuple[str, str], today: date, last: date | None) -> str:
    """A table's day partitions (the attempt log's, a partitioned archive's) run out
    today or have run out: the workers' maintenance (which makes them days ahead)
    has not run."""
    table, consequence = what
    through = f"through {last.isoformat()}" if last else "for no day"
    return (
        f"{table} has partitions {through} (today is {today.isoformat()}): "
        f"{consequence}; start a worker (its maintenance makes them) or run "
        "`manage.py pgqueue_prune` (it makes them too)"
    )


def _xmin_holder(holder: XminHolder) -> dict[str, Any]:
    return {
        "pid": holder.pid,
        "application_name": holder.application_name,
        "state": holder.state,
        "age_seconds": round(holder.age_seconds, 1),
        "xmin_age": holder.xmin_age,
    }


def _xmin_warning(h: dict[str, Any]) -> str:
    return (
        f"session pid {h['pid']} (application_name {h['application_name']!r}, "
        f"{h['state'] or 'unknown state'}) has held back the xmin horizon for "
        f"{h['age_seconds']:g} s: vacuum cannot remove the queue's dead rows while it "
        f"lasts (end it: SELECT pg_terminate_backend({h['pid']}))"
    )


def problems(data: dict[str, Any], limits: Thresholds) -> list[str]:
    """One sentence per threshold exceeded, naming the queue and the limit."""
    found: list[str] = []
    rows = [(f"queue {q['name']!r}", q) for q in data["queues"]]
    rows += [(f"endpoint {e['id']} ({e['url']})", e) for e in data["endpoints"]]
    for label, row in rows:
        age = row["oldest_due_seconds"]
        if limits.max_oldest_due is not None and age is not None and age > limits.max_oldest_due:
            found.append(
                f"{label}: the oldest due row has waited {age:g} s "
                f"(--max-oldest-due {limits.max_oldest_due:g}s)"
            )
        if limits.max_lapsed is not None and row["lapsed"] > limits.max_lapsed:
            found.append(
                f"{label}: {row['lapsed']} lapsed lease(s) (--max-lapsed {limits.max_lapsed})"
            )
    for q in data["message_queues"]:
        age = q["oldest_visible_seconds"]
        if limits.max_oldest_due is not None and age is not None and age > limits.max_oldest_due:
            found.append(
                f"message queue {q['name']!r}: the oldest visible message has waited {age:g} s "
                f"(--max-oldest-due {limits.max_oldest_due:g}s)"
            )
    if limits.max_dead is not None:
        dead = sum(row["dead"] for _, row in rows)
        dead += sum(q["dead_letters"] or 0 for q in data["message_queues"])
        if dead > limits.max_dead:
            found.append(f"{dead} row(s) in the dead-letter queue (--max-dead {limits.max_dead})")
    if limits.max_xmin_age is not None:
        found += [
            _xmin_warning(h)
            for h in data.get("xmin_holders", [])
            if h["age_seconds"] > limits.max_xmin_age
        ]
    if limits.min_workers is not None:
        alive = sum(1 for w in data["workers"] if w["alive"])
        if alive < limits.min_workers:
            found.append(f"{alive} live worker(s) (--min-workers {limits.min_workers})")
    return found


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    cells = [headers, *[["—" if v is None else str(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return [
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]


_COUNTS = ["waiting", "due", "deferred", "in_progress", "lapsed", "oldest_due_seconds", "dead"]
_COUNT_HEADERS = ["waiting", "due", "deferred", "in progress", "lapsed", "oldest due (s)", "dead"]


_MQ_COUNTS = ["messages", "visible", "in_flight", "delayed", "oldest_visible_seconds"]
_MQ_HEADERS = ["messages", "visible", "in flight", "delayed", "oldest visible (s)"]


def _count_cells(row: dict[str, Any]) -> list[Any]:
    """The count columns of one row; an estimated terminal count reads ``~N``."""
    return [f"~{row[k]}" if k == "dead" and row.get("estimated") else row[k] for k in _COUNTS]


def render_text(data: dict[str, Any]) -> str:
    """The snapshot as aligned tables, for a terminal."""
    lines = [f"pgqueue status at {data['measured_at'] or 'now'}", "", "Queues"]
    if data["queues"]:
        lines += _table(
            ["queue", *_COUNT_HEADERS],
            [[q["name"], *_count_cells(q)] for q in data["queues"]],
        )
    else:
        lines.append("(no jobs)")
    lines += [f"paused: queue {q['name']!r} since {q['paused_at']}" for q in data["paused_queues"]]
    lines += ["", "Webhook endpoints"]
    if data["endpoints"]:
        lines += _table(
            ["id", "url", "state", *_COUNT_HEADERS],
            [
                [
                    e["id"],
                    f"{e['url']} ({e['application'] or 'global'})",
                    ("active" if e["is_active"] else "disabled") + f", {e['breaker_state']}",
                    *_count_cells(e),
                ]
                for e in data["endpoints"]
            ],
        )
    else:
        lines.append("(no endpoints)")
    if data["message_queues"]:
        lines += ["", "Message queues"]
        lines += _table(
            ["queue", *_MQ_HEADERS],
            [[q["name"], *(q[k] for k in _MQ_COUNTS)] for q in data["message_queues"]],
        )
    lines += ["", "Workers"]
    if data["workers"]:
        lines += _table(
            ["worker", "host", "pid", "version", "queues", "threads", "last seen (s)", "state"],
            [
                [
                    w["worker_id"],
                    w["host"],
                    w["pid"],
                    w["version"],
                    ",".join(w["queues"]) or "*",
                    w["concurrency"],
                    w["seconds_since_seen"],
                    "alive" if w["alive"] else "gone",
                ]
                for w in data["workers"]
            ],
        )
    else:
        lines.append("(no workers)")
    if data.get("warnings"):
        lines += ["", "WARNING:", *(f"  - {w}" for w in data["warnings"])]
    if data["problems"]:
        lines += ["", "NOT OK:", *(f"  - {p}" for p in data["problems"])]
    return "\n".join(lines)
