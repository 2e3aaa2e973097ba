"""A result line of the benchmark and the statistics it is reported with.

Apart from ``core.py``, which runs the workloads: the workloads of other modules
(``ingest.py``, ``mq.py``) report rows too, and ``core`` calls them, so the row
lives where both can import it without an import circle.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

#: How many rows finished, and over how long (first claim to last completion).
DRAIN_SPAN = (
    "SELECT count(*), extract(epoch FROM max(finished_at) - min(last_attempted_at)) "
    "FROM {table} WHERE status = 'succeeded'"
)


@dataclass
class Row:
    """One line of the result table."""

    workload: str
    config: str
    unit: str
    values: list[float] = field(default_factory=list)
    reference: str = ""
    ref_values: list[float] = field(default_factory=list)
    target: str = ""
    #: "higher" (throughput) or "lower" (latency, cost) is better.
    better: str = "higher"
    #: The ratio ours/reference must reach this (or stay below it for "lower").
    goal: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    def ratio(self) -> float | None:
        if not self.values or not self.ref_values:
            return None
        ref = statistics.median(self.ref_values)
        return statistics.median(self.values) / ref if ref else None

    def verdict(self) -> str:
        ratio = self.ratio()
        if self.goal is None or ratio is None:
            return ""
        ok = ratio >= self.goal if self.better == "higher" else ratio <= self.goal
        return "met" if ok else "MISSED"

    def as_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "config": self.config,
            "unit": self.unit,
            "values": self.values,
            "median": self.median(),
            "reference": self.reference,
            "reference_values": self.ref_values,
            "reference_median": statistics.median(self.ref_values) if self.ref_values else None,
            "ratio": self.ratio(),
            "target": self.target,
            "verdict": self.verdict(),
            **self.extra,
        }


def fmt(values: list[float]) -> str:
    """``median (min-max)`` with sensible precision."""
    if not values:
        return "-"

    def one(v: float) -> str:
        if abs(v) >= 100:
            return f"{v:,.0f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        return f"{v:.2f}"

    med = statistics.median(values)
    if len(values) == 1:
        return one(med)
    return f"{one(med)} ({one(min(values))}-{one(max(values))})"


def pctl(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, math.ceil(p / 100 * len(sorted_values)) - 1))
    return sorted_values[k]
