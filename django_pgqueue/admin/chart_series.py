"""The dashboard's charts over time: rollup minutes made into series and SVG.

Reads the rollup (``rollup/store.py``: one row per name and minute), never the
job or delivery history, so a page view costs one indexed read per kind. A
window is the last hour in minutes or the last day in ten-minute buckets.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.utils import timezone
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from ..rollup import histogram
from ..rollup import store as rollup_store
from ..rollup.store import RollupMinute
from .charts import MAX_SERIES, Series, line_chart
from .display import endpoint_label

#: Window name -> (seconds shown, seconds per bucket).
WINDOWS: dict[str, tuple[int, int]] = {"hour": (3600, 60), "day": (86400, 600)}
DEFAULT_WINDOW = "hour"


@dataclass(frozen=True, slots=True)
class Chart:
    """One chart of the dashboard: its title and its SVG."""

    title: str
    svg: SafeString


def window_of(value: str | None) -> str:
    """The window asked for, or the default for anything else (untrusted input)."""
    return value if value in WINDOWS else DEFAULT_WINDOW


def _buckets(
    rows: Sequence[RollupMinute], seconds: int, step: int, now: dt.datetime
) -> tuple[dict[str, list[list[RollupMinute]]], dt.datetime]:
    """The rows of each name, by bucket index (oldest first), and the first bucket."""
    end = now.replace(second=0, microsecond=0)
    count = seconds // step
    start = end - dt.timedelta(seconds=step * (count - 1))
    # Buckets align on their size from the epoch, so a page reloaded within a
    # bucket shows the same bucket edges.
    start -= dt.timedelta(seconds=int(start.timestamp()) % step)
    by_name: dict[str, list[list[RollupMinute]]] = {}
    for row in rows:
        index = int((row.minute - start).total_seconds() // step)
        if 0 <= index < count:
            by_name.setdefault(row.name, [[] for _ in range(count)])[index].append(row)
    return by_name, start


def _work(row: RollupMinute) -> int:
    """What a minute of a job queue, endpoint or application did."""
    return row.ok + row.failed + row.retried


def _busiest(
    by_name: dict[str, list[list[RollupMinute]]], work: Callable[[RollupMinute], int] = _work
) -> list[str]:
    def volume(name: str) -> int:
        return sum(work(r) for b in by_name[name] for r in b)

    return sorted(by_name, key=lambda n: (-volume(n), n))[:MAX_SERIES]


def _count(bucket: list[RollupMinute], pick: Callable[[RollupMinute], int]) -> float:
    return float(sum(pick(r) for r in bucket))


def _p95(bucket: list[RollupMinute], pick: Callable[[RollupMinute], list[int]]) -> float | None:
    return histogram.percentile(histogram.merge(pick(r) for r in bucket), 0.95)


def _depth(bucket: list[RollupMinute]) -> float | None:
    sampled = [r.depth for r in bucket if r.depth is not None]
    return float(max(sampled)) if sampled else None


def _failure_rate(bucket: list[RollupMinute]) -> float | None:
    total = sum(r.ok + r.failed + r.retried for r in bucket)
    return None if not total else 100.0 * sum(r.failed + r.retried for r in bucket) / total


def charts_of(
    kind: str,
    window: str,
    metrics: Sequence[tuple[Any, str, Callable[[list[RollupMinute]], float | None]]],
    *,
    names: Sequence[str] | None = None,
    labels: Callable[[Sequence[str]], dict[str, str]] | None = None,
    work: Callable[[RollupMinute], int] = _work,
    now: dt.datetime | None = None,
) -> list[Chart]:
    """One chart per metric (title, unit, value of a bucket), a line per name (the
    busiest MAX_SERIES of the window by ``work``, or of ``names``); ``labels`` names
    the lines shown (default: their names)."""
    seconds, step = WINDOWS[window_of(window)]
    now = now or timezone.now()
    rows = rollup_store.read(kind, seconds, names)
    by_name, start = _buckets(rows, seconds, step, now)
    shown = _busiest(by_name, work)
    label = labels(shown) if labels else {}
    last = start + dt.timedelta(seconds=step * (seconds // step - 1))
    fmt = "%H:%M" if window_of(window) == "hour" else "%a %H:%M"
    start_label = timezone.localtime(start).strftime(fmt)
    end_label = timezone.localtime(last).strftime(fmt)
    per = _("per minute") if step == 60 else _("per 10 minutes")
    charts = []
    for title, unit, value in metrics:
        full_title = f"{title} ({per})" if unit == "" else str(title)
        series = [
            Series(label.get(name, name), [value(b) for b in by_name[name]]) for name in shown
        ]
        svg = line_chart(
            full_title, series, start_label=start_label, end_label=end_label, unit=unit
        )
        charts.append(Chart(full_title, svg))
    return charts


#: The job queues' charts: throughput, failures, p95 wait and run time, depth.
QUEUE_METRICS: tuple[tuple[Any, str, Callable[[list[RollupMinute]], float | None]], ...] = (
    (_("Jobs succeeded"), "", lambda b: _count(b, lambda r: r.ok)),
    (
        _("Attempts failed (retried or dead)"),
        "",
        lambda b: _count(b, lambda r: r.failed + r.retried),
    ),
    (_("p95 wait, due to start"), "s", lambda b: _p95(b, lambda r: r.wait_hist)),
    (_("p95 run time"), "s", lambda b: _p95(b, lambda r: r.run_hist)),
    (_("Depth (jobs waiting)"), "", _depth),
)


def queue_charts(window: str, queue: str | None = None) -> list[Chart]:
    """The job queues' charts for ``window`` (one queue only when ``queue``)."""
    return charts_of("queue", window, QUEUE_METRICS, names=[queue] if queue else None)


#: Endpoints' and applications' charts: deliveries, failure rate, p95 latency.
DELIVERY_METRICS: tuple[tuple[Any, str, Callable[[list[RollupMinute]], float | None]], ...] = (
    (_("Deliveries"), "", lambda b: _count(b, lambda r: r.ok + r.failed + r.retried)),
    (_("Failure rate"), "%", _failure_rate),
    (_("p95 latency"), "s", lambda b: _p95(b, lambda r: r.run_hist)),
)


def _endpoint_labels(names: Sequence[str]) -> dict[str, str]:
    from ..models.webhooks import Endpoint

    ids = [int(n) for n in names if n.isdigit()]
    rows = Endpoint.objects.filter(id__in=ids).values_list("id", "url", "application__uid")
    return {str(i): endpoint_label(i, url, uid) for i, url, uid in rows}


def endpoint_charts(window: str, application: str | None = None) -> list[Chart]:
    """The endpoints' charts (only ``application``'s endpoints when given)."""
    names = None
    if application is not None:
        from ..models.webhooks import Endpoint

        ids = Endpoint.objects.filter(application__uid=application).values_list("id", flat=True)
        names = [str(i) for i in ids] or ["-"]  # "-": no endpoint, so no line
    return charts_of("endpoint", window, DELIVERY_METRICS, names=names, labels=_endpoint_labels)


def application_charts(window: str, application: str | None = None) -> list[Chart]:
    """The applications' charts (by uid; one application when given)."""
    names = [application] if application is not None else None
    return charts_of("application", window, DELIVERY_METRICS, names=names)


def _sent(row: RollupMinute) -> int:
    """Messages sent in a message queue's minute (``rollup/store.py``: kept in
    ``run_hist`` with the sampler's marks)."""
    return row.run_hist[rollup_store.MQ_SENT] if len(row.run_hist) > rollup_store.MQ_SENT else 0


def _mq_work(row: RollupMinute) -> int:
    return _sent(row) + row.ok


#: The message queues' charts: sent, settled, archived, depth (the sampler's minutes).
MQ_METRICS: tuple[tuple[Any, str, Callable[[list[RollupMinute]], float | None]], ...] = (
    (_("Messages sent"), "", lambda b: _count(b, _sent)),
    (_("Messages settled (deleted or archived)"), "", lambda b: _count(b, lambda r: r.ok)),
    (_("Messages archived"), "", lambda b: _count(b, lambda r: r.failed)),
    (_("Depth (messages visible)"), "", _depth),
)


def message_queue_charts(window: str, queue: str | None = None) -> list[Chart]:
    """The message queues' charts for ``window`` (one queue only when ``queue``)."""
    return charts_of("mq", window, MQ_METRICS, names=[queue] if queue else None, work=_mq_work)
