"""The phases of the pressure cells, the jobs' (``pressure_cells.py``) and the message
queues' (``pressure_cells_mq.py``) alike: their schedule, the runner that offers a
paced load through them (pinning the horizon in one, starting the readers in another)
while sampling the queue table, and what each phase is summed up by, in the result
file after a run and in the report's table."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
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


class Load:
    """A producer thread offering ``rate`` items/s, each by ``send(conn)``."""

    def __init__(self, bench: Any, send: Callable[[Any], None], rate: float) -> None:
        self.bench, self.send, self.rate = bench, send, rate
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        with self.bench.conn() as conn:
            nxt = time.monotonic()
            while not self.stopping.is_set():
                self.send(conn)
                nxt += 1.0 / self.rate
                delay = nxt - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                elif delay < -1.0:
                    nxt = time.monotonic()  # fell behind: offer, do not catch up


def reader(bench: Any, scan: str, stopping: threading.Event) -> None:
    """A long report: REPEATABLE READ transactions of 60 s, ``scan`` twice a second."""
    with bench.conn() as conn:
        while not stopping.is_set():
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            began = time.monotonic()
            while not stopping.is_set() and time.monotonic() - began < 60:
                conn.execute(scan).fetchone()
                stopping.wait(0.5)
            conn.execute("ROLLBACK")


def sampler(bench: Any, query: str, stopping: threading.Event, samples: list[list[float]]) -> None:
    """Every 5 s a sample: the seconds since the start, then ``query``'s row as integers
    (dead tuples, table size in bytes, backlog, ...)."""
    t0 = time.monotonic()
    with bench.conn() as conn:
        while not stopping.is_set():
            row = conn.execute(query).fetchone()
            samples.append([round(time.monotonic() - t0, 1), *(int(v) for v in row)])
            stopping.wait(5)


Bound = tuple[str, Any, Any, float]  # a phase: name, start, end (the server's clock), rate


def run_phases(
    bench: Any,
    config: str,
    send: Callable[[Any], None],
    *,
    table: str,
    key: str,
    sample: str,
    minutes: float,
    rate: float,
    capacity: float,
    scale: float,
    only: set[str] | None,
) -> tuple[list[Bound], list[list[float]]]:
    """Offer ``rate`` sends/s (``capacity`` times the overload's factor in the overload)
    through the phases (those in ``only`` if given), with ``sample`` sampled every 5 s:
    in ``pinned`` one session idles in a REPEATABLE READ transaction that read
    ``table``, in ``readers`` four readers count ``table`` and take the max of its
    ``key``. The consumers are the caller's to start before and stop after."""
    load = Load(bench, send, rate)
    samples: list[list[float]] = []
    stopping = threading.Event()
    sampling = threading.Thread(
        target=sampler, args=(bench, sample, stopping, samples), daemon=True
    )
    load.thread.start()
    sampling.start()
    bounds: list[Bound] = []
    try:
        for name, seconds, load_factor in phases(minutes, scale):
            if only is not None and name not in only:
                continue
            load.rate = rate * load_factor if load_factor > 0 else capacity * -load_factor
            with bench.conn() as conn:
                (start,) = conn.execute("SELECT clock_timestamp()").fetchone()
            pin, readers, readers_stop = None, [], threading.Event()
            if name == "pinned":
                pin = bench.conn()
                pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                pin.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchall()
            if name == "readers":
                scan = f"SELECT count(*), max({key}) FROM {table}"
                readers = [
                    threading.Thread(target=reader, args=(bench, scan, readers_stop), daemon=True)
                    for _ in range(4)
                ]
                for r in readers:
                    r.start()
            time.sleep(seconds)
            readers_stop.set()
            for r in readers:
                r.join()
            if pin is not None:
                pin.execute("ROLLBACK")
                pin.close()
            with bench.conn() as conn:
                (end,) = conn.execute("SELECT clock_timestamp()").fetchone()
            bounds.append((name, start, end, load.rate))
            print(config, name, "done", time.strftime("%H:%M:%S"), flush=True)
    finally:
        load.stopping.set()
        stopping.set()
        load.thread.join()
        sampling.join()
        time.sleep(2)
    return bounds, samples


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
