"""Server-side SVG charts: a line chart of series over time, and a run sparkline.

The console draws its charts here, as inline SVG in the page: no script, no
front-end build, nothing a strict Content-Security-Policy refuses (presentation
attributes only, no ``style``). Each chart is readable without colour: every
series has its own dash pattern and marker shape, the legend names it beside a
sample of its line, and the ``<title>``/``<desc>`` (referenced by
``aria-labelledby``) say what it shows and its latest and highest values, so a
screen reader has the chart's message too. Every text is escaped here.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

#: Dash patterns, markers and colours of the series, in order (a chart shows at
#: most this many series: the caller picks the busiest).
DASHES = ("", "6 3", "2 3", "8 3 2 3", "1 2")
MARKERS = ("circle", "square", "triangle", "diamond", "cross")
COLOURS = ("#205067", "#b3541e", "#4f7a28", "#7a3b8f", "#555555")
MAX_SERIES = len(DASHES)

WIDTH = 420
HEIGHT = 150
LEFT = 48
RIGHT = 8
TOP = 10
BOTTOM = 22

_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Series:
    """One line: its name and a value per time bucket (None: no data there)."""

    label: str
    values: Sequence[float | None]


def _nice_max(value: float) -> float:
    """The smallest 1-2-5 step at or above ``value`` (1 for an empty chart)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return float(step * power)
    return float(10 * power)  # pragma: no cover - the loop ends at 10


def format_value(value: float | None, unit: str) -> str:
    """A value as the chart's labels show it: ``12``, ``0.25 s``, ``1.5k``."""
    if value is None:
        return "-"
    if unit == "s":
        if value < 1:
            return f"{value * 1000:.0f} ms"
        return f"{value:.3g} s"
    if unit == "%":
        return f"{value:.0f} %"
    if abs(value) >= 10_000:
        return f"{value / 1000:.0f}k"
    if abs(value) >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2g}"


def _marker(kind: str, x: float, y: float, colour: str) -> str:
    if kind == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>'
    if kind == "square":
        return f'<rect x="{x - 3:.1f}" y="{y - 3:.1f}" width="6" height="6" fill="{colour}"/>'
    if kind == "triangle":
        points = f"{x:.1f},{y - 3.5:.1f} {x + 3.5:.1f},{y + 3:.1f} {x - 3.5:.1f},{y + 3:.1f}"
        return f'<polygon points="{points}" fill="{colour}"/>'
    if kind == "diamond":
        points = f"{x:.1f},{y - 4:.1f} {x + 4:.1f},{y:.1f} {x:.1f},{y + 4:.1f} {x - 4:.1f},{y:.1f}"
        return f'<polygon points="{points}" fill="{colour}"/>'
    return (
        f'<path d="M{x - 3:.1f} {y - 3:.1f}L{x + 3:.1f} {y + 3:.1f}M{x - 3:.1f} {y + 3:.1f}'
        f'L{x + 3:.1f} {y - 3:.1f}" stroke="{colour}" stroke-width="1.5"/>'
    )


def _summary(series: Series, unit: str) -> str:
    known = [v for v in series.values if v is not None]
    if not known:
        return f"{series.label}: no data"
    return (
        f"{series.label}: latest {format_value(known[-1], unit)}, "
        f"highest {format_value(max(known), unit)}"
    )


def line_chart(
    title: str,
    series: Sequence[Series],
    *,
    start_label: str,
    end_label: str,
    unit: str = "",
) -> SafeString:
    """An SVG line chart of ``series`` (at most MAX_SERIES) over equal time buckets.

    ``start_label`` and ``end_label`` name the first and last bucket on the x axis;
    ``unit`` is ``""`` (counts), ``"s"`` (durations) or ``"%"``.
    """
    series = list(series)[:MAX_SERIES]
    chart_id = f"pgq-chart-{next(_ids)}"
    buckets = max((len(s.values) for s in series), default=0)
    known = [v for s in series for v in s.values if v is not None]
    top = _nice_max(max(known, default=0.0))
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM

    def x_of(i: int) -> float:
        return LEFT + (plot_w * i / (buckets - 1) if buckets > 1 else plot_w / 2)

    def y_of(v: float) -> float:
        return TOP + plot_h * (1 - v / top)

    legend_h = 16 * len(series) + (4 if series else 0)
    height = HEIGHT + legend_h
    desc = "; ".join(_summary(s, unit) for s in series) or "no data"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="pgq-chart" role="img" '
        f'width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
        f'aria-labelledby="{chart_id}-t {chart_id}-d">',
        f'<title id="{chart_id}-t">{escape(title)}</title>',
        f'<desc id="{chart_id}-d">{escape(desc)}</desc>',
        f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>',
    ]
    for fraction in (0.0, 0.5, 1.0):
        y = TOP + plot_h * (1 - fraction)
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" '
            f'stroke="#d0d0d0" stroke-width="1"/>'
        )
        parts.append(
            f'<text x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end" font-size="11" '
            f'fill="#333333">{escape(format_value(top * fraction, unit))}</text>'
        )
    base = TOP + plot_h + 15
    parts.append(
        f'<text x="{LEFT}" y="{base}" font-size="11" fill="#333333">{escape(start_label)}</text>'
    )
    parts.append(
        f'<text x="{WIDTH - RIGHT}" y="{base}" text-anchor="end" font-size="11" '
        f'fill="#333333">{escape(end_label)}</text>'
    )
    for n, line in enumerate(series):
        colour, dash, marker = COLOURS[n], DASHES[n], MARKERS[n]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        segment: list[str] = []
        segments: list[list[str]] = []
        last: tuple[float, float] | None = None
        for i, value in enumerate(line.values):
            if value is None:
                if segment:
                    segments.append(segment)
                segment = []
                continue
            point = (x_of(i), y_of(value))
            segment.append(f"{point[0]:.1f},{point[1]:.1f}")
            last = point
        if segment:
            segments.append(segment)
        for points in segments:
            if len(points) == 1:
                continue  # a lone value shows as its marker only
            parts.append(
                f'<polyline points="{" ".join(points)}" fill="none" stroke="{colour}" '
                f'stroke-width="2"{dash_attr}/>'
            )
        if last is not None:
            parts.append(_marker(marker, last[0], last[1], colour))
        y = HEIGHT + 16 * n + 8
        parts.append(
            f'<line x1="{LEFT}" y1="{y}" x2="{LEFT + 28}" y2="{y}" stroke="{colour}" '
            f'stroke-width="2"{dash_attr}/>'
        )
        parts.append(_marker(marker, LEFT + 14, y, colour))
        parts.append(
            f'<text x="{LEFT + 36}" y="{y + 4}" font-size="12" fill="#222222">'
            f"{escape(_summary(line, unit))}</text>"
        )
    if not known:
        parts.append(
            f'<text x="{LEFT + plot_w / 2:.1f}" y="{TOP + plot_h / 2:.1f}" '
            f'text-anchor="middle" font-size="12" fill="#555555">no data in this window</text>'
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every text above is escaped


#: How a run's outcome is drawn in a sparkline: bar height (of 16), fill, and the
#: letter under it, so outcomes differ by shape and text, not colour alone.
OUTCOME_MARKS = {
    "succeeded": (16, "#4f7a28", "✓"),
    "failed": (10, "#b3541e", "!"),
    "dead": (10, "#a00000", "✗"),
    "cancelled": (6, "#777777", "-"),
    "pending": (4, "#205067", "."),
    "in_progress": (4, "#205067", "."),
    "pruned": (2, "#999999", "?"),
}


def sparkline(title: str, outcomes: Sequence[tuple[str, str]]) -> SafeString:
    """A bar per run, oldest first: ``outcomes`` are ``(status, when)`` pairs.

    Each bar has its own ``<title>`` (status and time) for a tooltip and a screen
    reader; heights and the mark under each bar tell the outcomes apart.
    """
    chart_id = f"pgq-spark-{next(_ids)}"
    width = max(12 * len(outcomes), 12)
    counts: dict[str, int] = {}
    for status, _ in outcomes:
        counts[status] = counts.get(status, 0) + 1
    desc = ", ".join(f"{n} {status}" for status, n in counts.items()) or "no runs yet"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="pgq-spark" role="img" '
        f'width="{width}" height="30" viewBox="0 0 {width} 30" '
        f'aria-labelledby="{chart_id}-t {chart_id}-d">',
        f'<title id="{chart_id}-t">{escape(title)}</title>',
        f'<desc id="{chart_id}-d">{escape(desc)}</desc>',
    ]
    for i, (status, when) in enumerate(outcomes):
        height, fill, mark = OUTCOME_MARKS.get(status, (4, "#555555", "?"))
        x = 12 * i + 2
        parts.append(
            f"<g><title>{escape(f'{status} {when}')}</title>"
            f'<rect x="{x}" y="{16 - height}" width="8" height="{height}" fill="{fill}"/>'
            f'<text x="{x + 4}" y="28" text-anchor="middle" font-size="9" '
            f'fill="#222222">{escape(mark)}</text></g>'
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every text above is escaped
