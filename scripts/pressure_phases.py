"""The phases of the pressure cells, the jobs' (``pressure_cells.py``) and the message
queues' (``pressure_cells_mq.py``) alike: their schedule, and what each phase is
summed up by, in the result file after a run and in the report's table."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

#: The pickup latency's percentiles kept per phase, under their keys in the result file.
PERCENTILES = {"p50_ms": 0.5, "p95_ms": 0.95, "p99_ms": 0.99}

#: The backlog is gone when a sample finds fewer than this many waiting.
DRAINED = 50


def phases(minutes: float, scale: float = 1.0) -> list[tuple[str, float, float]]:
    """(name, seconds, load as a multiple of the steady rate; overload in capacities)."""
    pressure = 60 * minutes
    return [
        ("clean", 120 * scale, 1.0),
        ("pinned", pressure, 1.0),
        ("readers", pressure, 1.0),
        ("after", 120 * scale, 1.0),
        ("overload", 180 * scale, -1.5),  # negative: a multiple of the worker's capacity
        ("recovery", 300 * scale, 1.0),
    ]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def summary(
    name: str, start: Any, end: Any, offered: float, done: int, pickups: list[float], **counts: int
) -> dict[str, Any]:
    """A phase in the result file: its length, the load offered and done per second,
    ``counts`` (how many were enqueued, ...) and the pickup percentiles in ms."""
    span = (end - start).total_seconds()
    return {
        "phase": name,
        "seconds": span,
        "offered": offered,
        "jobs_s": done / span,
        **counts,
        **{key: 1000 * pct(pickups, q) for key, q in PERCENTILES.items()},
    }


def phase_spans(result: dict[str, Any]) -> list[tuple[str, float, float]]:
    spans, t = [], 0.0  # the sampler starts with the load, after the worker's start-up
    for p in result["phases"]:
        spans.append((p["phase"], t, t + p["seconds"]))
        t += p["seconds"]
    return spans


def phase_rows(result: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], int, int]]:
    """Each phase of a result: its name, its summary, and the most dead tuples and the
    longest backlog sampled in it."""
    for name, a, b in phase_spans(result):
        p = next(p for p in result["phases"] if p["phase"] == name)
        inside = [s for s in result["samples"] if a <= s[0] < b]
        dead = max((s[1] for s in inside), default=0)
        backlog = max((s[3] for s in inside), default=0)
        yield name, p, dead, backlog


def drained_after(result: dict[str, Any], t: float) -> float | None:
    """When the backlog was first gone after ``t`` (seconds into the run), or None."""
    return next((s[0] for s in result["samples"] if s[0] > t and s[3] < DRAINED), None)
