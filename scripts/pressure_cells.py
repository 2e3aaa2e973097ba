"""Pressure cells: the queue under a pinned xmin horizon, with and without the history
(docs/performance.md, "Vacuum held back"). Measures; asserts nothing.

    DATABASE_URL=postgresql://.../pgq_history python scripts/pressure_cells.py [seconds] [rate]

For each configuration, in a scratch database (``<name>_bench``):

- ``stay``: ``HISTORY_DELAY_SECONDS = None``, finished jobs stay in ``pgqueue_job`` (what
  the previous release did, without a prune);
- ``history``: the mover on (``HISTORY_DELAY_SECONDS = 5``, a pass every 2 s).

one ``runworkers`` process (concurrency 4) serves a steady offered load of ``rate``
no-op jobs a second, through three phases of ``seconds`` each:

1. ``clean``: nothing else runs;
2. ``pinned``: one session idle in a ``REPEATABLE READ`` transaction (its snapshot pins
   the xmin horizon) and four ``REPEATABLE READ`` readers scanning ``pgqueue_job``;
3. ``after``: the pin and the readers gone: recovery.

Sampled every 5 s: dead tuples and size of ``pgqueue_job`` (``pgstattuple``). Per
phase: jobs finished per second, and the pickup latency (``started_at - created_at``)
p50/p99 of the jobs enqueued in it. Prints a table (Markdown) and, with matplotlib
installed, writes ``pressure_cells.svg``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

import django  # noqa: E402

django.setup()

from django_pgqueue.bench.core import Bench, stop  # noqa: E402

PHASES = ("clean", "pinned", "after")

INSERT_NOOP = """INSERT INTO pgqueue_job (status, priority, attempts, max_attempts,
    next_attempt_at, worker_id, last_error, errors, created_at, updated_at, task_path,
    queue_name, backend, args, kwargs, worker_ids, atomic)
VALUES ('pending', 0, 0, 1, clock_timestamp(), '', '', '[]', clock_timestamp(),
    clock_timestamp(), 'django_pgqueue.bench.tasks.noop', 'default', 'default', '[]', '{}',
    '[]', false)"""

WAKE = "SELECT pg_notify('pgqueue', '')"

PICKUP = """SELECT extract(epoch FROM started_at - created_at) FROM (
    SELECT created_at, started_at FROM pgqueue_job WHERE started_at IS NOT NULL
    UNION ALL SELECT created_at, started_at FROM pgqueue_job_history) AS j
WHERE created_at >= %s AND created_at < %s"""

FINISHED = """SELECT (SELECT count(*) FROM pgqueue_job WHERE finished_at >= %(a)s
                                                 AND finished_at < %(b)s)
     + (SELECT count(*) FROM pgqueue_job_history WHERE finished_at >= %(a)s
                                                 AND finished_at < %(b)s)"""


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def producer(bench: Bench, rate: float, stopping: threading.Event) -> None:
    with bench.conn() as conn:
        step, nxt = 1.0 / rate, time.monotonic()
        while not stopping.is_set():
            conn.execute(INSERT_NOOP)
            conn.execute(WAKE)  # as an enqueue does: the pickup is not the poll interval
            nxt += step
            delay = nxt - time.monotonic()
            if delay > 0:
                time.sleep(delay)


def reader(bench: Bench, stopping: threading.Event) -> None:
    with bench.conn() as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        while not stopping.is_set():
            conn.execute("SELECT count(*), max(id) FROM pgqueue_job").fetchone()
            stopping.wait(0.5)
        conn.execute("ROLLBACK")


def sampler(bench: Bench, stopping: threading.Event, samples: list[tuple[float, int, int]]):
    t0 = time.monotonic()
    with bench.conn() as conn:
        while not stopping.is_set():
            dead, size = conn.execute(
                "SELECT dead_tuple_count, table_len FROM pgstattuple('pgqueue_job')"
            ).fetchone()
            samples.append((time.monotonic() - t0, int(dead), int(size)))
            stopping.wait(5)


def cell(bench: Bench, config: str, seconds: float, rate: float) -> dict[str, Any]:
    bench.reset()
    with bench.conn() as conn:
        conn.execute("TRUNCATE pgqueue_job_history")
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        conn.execute("VACUUM ANALYZE pgqueue_job")
    env = {"PGQUEUE_MAINTENANCE_INTERVAL": "2"}
    env["PGQUEUE_HISTORY_DELAY_SECONDS"] = "none" if config == "stay" else "5"
    argv = [*bench._manage(), "runworkers", "--skip-checks", "--concurrency", "4"]
    worker = subprocess.Popen(argv, env=bench.child_env(**env), stdout=subprocess.DEVNULL)
    stopping, pin_stop = threading.Event(), threading.Event()
    samples: list[tuple[float, int, int]] = []
    threads = [
        threading.Thread(target=producer, args=(bench, rate, stopping), daemon=True),
        threading.Thread(target=sampler, args=(bench, stopping, samples), daemon=True),
    ]
    for t in threads:
        t.start()
    bounds: dict[str, tuple[Any, Any]] = {}
    try:
        for phase in PHASES:
            with bench.conn() as conn:
                (start,) = conn.execute("SELECT clock_timestamp()").fetchone()
            pin = None
            readers: list[threading.Thread] = []
            if phase == "pinned":
                pin_stop.clear()
                pin = bench.conn()
                pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                pin.execute("SELECT 1 FROM pgqueue_job LIMIT 1").fetchall()
                readers = [
                    threading.Thread(target=reader, args=(bench, pin_stop), daemon=True)
                    for _ in range(4)
                ]
                for r in readers:
                    r.start()
            time.sleep(seconds)
            if pin is not None:
                pin_stop.set()
                for r in readers:
                    r.join()
                pin.execute("ROLLBACK")
                pin.close()
            with bench.conn() as conn:
                (end,) = conn.execute("SELECT clock_timestamp()").fetchone()
            bounds[phase] = (start, end)
    finally:
        stopping.set()
        for t in threads:
            t.join()
        time.sleep(2)
        stop(worker)
    out: dict[str, Any] = {"config": config, "samples": samples, "phases": {}}
    with bench.conn() as conn:
        for phase, (a, b) in bounds.items():
            pickups = [float(r[0]) for r in conn.execute(PICKUP, (a, b)).fetchall()]
            (done,) = conn.execute(FINISHED, {"a": a, "b": b}).fetchone()
            span = (b - a).total_seconds()
            out["phases"][phase] = {
                "jobs_s": done / span,
                "p50_ms": 1000 * pct(pickups, 0.5),
                "p99_ms": 1000 * pct(pickups, 0.99),
                "jobs": len(pickups),
            }
    return out


def plot(results: list[dict[str, Any]], seconds: float, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        path.write_text(svg_plot(results, seconds))
        print(f"plot written to {path} (plain SVG: matplotlib is not installed)")
        return
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for res in results:
        xs = [s[0] for s in res["samples"]]
        ax.plot(xs, [s[1] for s in res["samples"]], label=res["config"])
    for x in (seconds, 2 * seconds):
        ax.axvline(x, color="grey", linestyle=":")
    ax.set_xlabel("seconds (clean | pinned | after)")
    ax.set_ylabel("dead tuples in pgqueue_job")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    print(f"plot written to {path}")


def svg_plot(results: list[dict[str, Any]], seconds: float) -> str:
    """Dead tuples over time as a plain SVG line chart (no plotting library needed)."""
    width, height, pad = 640, 300, 50
    t_max = 3 * seconds
    y_max = max((s[1] for r in results for s in r["samples"]), default=1) or 1
    colours = ["#1f77b4", "#d62728", "#2ca02c"]

    def xy(t: float, v: float) -> str:
        x = pad + (width - 2 * pad) * min(t, t_max) / t_max
        y = height - pad - (height - 2 * pad) * v / y_max
        return f"{x:.1f},{y:.1f}"

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" '
        'stroke="black"/>',
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>',
        f'<text x="{pad}" y="{pad - 10}">dead tuples in pgqueue_job (max {y_max})</text>',
        f'<text x="{pad}" y="{height - 15}">seconds: clean | pinned (xmin held, 4 RR '
        "readers) | after</text>",
    ]
    for boundary in (seconds, 2 * seconds):
        x = xy(boundary, 0).split(",")[0]
        parts.append(
            f'<line x1="{x}" y1="{pad}" x2="{x}" y2="{height - pad}" stroke="grey" '
            'stroke-dasharray="4"/>'
        )
    for i, res in enumerate(results):
        points = " ".join(xy(t, v) for t, v, _ in res["samples"])
        colour = colours[i % len(colours)]
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}"/>'
        )
        parts.append(
            f'<text x="{width - pad - 90}" y="{pad + 15 * (i + 1)}" fill="{colour}">'
            f"{res['config']}</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    rate = float(sys.argv[2]) if len(sys.argv) > 2 else 100.0
    bench = Bench(only=["drain"], out=print)
    bench.create_database()
    results = []
    try:
        for config in ("stay", "history"):
            res = cell(bench, config, seconds, rate)
            results.append(res)
            print(config, res["phases"], flush=True)
    finally:
        bench.drop_database()
    print(f"\n{seconds:g} s per phase, {rate:g} jobs/s offered, load {os.getloadavg()}\n")
    print("| config | phase | jobs/s | pickup p50 ms | pickup p99 ms | dead tuples (max) |")
    print("|---|---|---|---|---|---|")
    for res in results:
        for i, phase in enumerate(PHASES):
            p = res["phases"][phase]
            dead = [s[1] for s in res["samples"] if i * seconds <= s[0] < (i + 1) * seconds]
            print(
                f"| {res['config']} | {phase} | {p['jobs_s']:.0f} | {p['p50_ms']:.0f} | "
                f"{p['p99_ms']:.0f} | {max(dead) if dead else '-'} |"
            )
        last = res["samples"][-1] if res["samples"] else None
        if last:
            print(f"| {res['config']} | end | | | | {last[1]} (table {last[2] // 1024} kB) |")
    print("\nsamples (s, dead, bytes):")
    for res in results:
        print(res["config"], res["samples"])
    plot(results, seconds, REPO / "docs" / "pressure_cells.svg")


if __name__ == "__main__":
    main()
