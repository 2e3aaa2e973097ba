"""A/B of the history mover's cost on the drain, in one run (docs/performance.md,
"The history mover on the drain").

    DATABASE_URL=postgresql://.../pgq_history python scripts/history_drain_ab.py [n] [rounds]

In a scratch database (``<name>_bench``, pgqueue_bench's), rounds alternate:

- ``raw``: one psycopg loop claiming and completing 100 rows at a time (the ceiling);
- ``A``: ``runworkers --burst`` draining ``n`` no-ops, no mover (finished jobs stay);
- ``B``: the same drain while a mover moves every finished job to history at once
  (``HISTORY_DELAY_SECONDS = 0``, a pass every 0.2 s: the worst case; the default
  delay of 30 s moves the same rows later, off the drain).

Per round: jobs/s (wall) and CPU per job in ms: the worker process (its rusage) plus
every backend of the scratch database, the mover's included (utime+stime from
/proc, sampled every 20 ms while it runs). Prints one line per round and the medians.
"""

from __future__ import annotations

import os
import resource
import statistics
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

from django_pgqueue import history  # noqa: E402
from django_pgqueue.bench.core import Bench, stop  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


class BackendCpu(threading.Thread):
    """CPU seconds of every backend of one database while it runs."""

    def __init__(self, bench: Bench) -> None:
        super().__init__(daemon=True)
        self.bench = bench
        self.seen: dict[int, tuple[float, float]] = {}  # pid -> (first, last)
        self.done = threading.Event()

    def run(self) -> None:
        with self.bench.conn() as conn:
            me = conn.info.backend_pid
            while not self.done.is_set():
                for (pid,) in conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                ).fetchall():
                    if pid == me:
                        continue
                    cpu = proc_cpu(pid)
                    if cpu is not None:
                        first = self.seen.get(pid, (cpu, cpu))[0]
                        self.seen[pid] = (first, cpu)
                time.sleep(0.02)

    def total(self) -> float:
        self.done.set()
        self.join()
        return sum(last - first for first, last in self.seen.values())


def mover(bench: Bench, stopping: threading.Event, moved: list[int]) -> None:
    with bench.conn() as conn:
        while not stopping.is_set():
            moved[0] += history.move_finished(conn, delay=0).moved
            stopping.wait(0.2)


def drain(bench: Bench, n: int, with_mover: bool) -> dict[str, Any]:
    bench.reset()
    with bench.conn() as conn:
        conn.execute("TRUNCATE pgqueue_job_history")
    bench.preload(n)
    bench.checkpoint(vacuum=True)
    cpu = BackendCpu(bench)
    cpu.start()
    time.sleep(0.1)
    stopping, moved = threading.Event(), [0]
    mover_thread = threading.Thread(target=mover, args=(bench, stopping, moved), daemon=True)
    argv = [*bench._manage(), "runworkers", "--burst", "--skip-checks", "--concurrency", "4"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    if with_mover:
        mover_thread.start()
    proc = subprocess.Popen(argv, env=bench.child_env(PGQUEUE_HISTORY_DELAY_SECONDS="none"))
    try:
        proc.wait(timeout=600)
    finally:
        stop(proc)
    wall = time.perf_counter() - t0
    stopping.set()
    if with_mover:
        mover_thread.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    worker_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    db_cpu = cpu.total()
    with bench.conn() as conn:
        (done,) = conn.execute(
            "SELECT (SELECT count(*) FROM pgqueue_job WHERE status = 'succeeded')"
            " + (SELECT count(*) FROM pgqueue_job_history)"
        ).fetchone()
    if done != n:
        raise RuntimeError(f"drain finished {done} of {n}")
    return {
        "jobs_s": n / wall,
        "cpu_ms": 1000 * (worker_cpu + db_cpu) / n,
        "worker_ms": 1000 * worker_cpu / n,
        "db_ms": 1000 * db_cpu / n,
        "moved": moved[0],
    }


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    bench = Bench(only=["drain"], n_drain=n, out=print)
    bench.create_database()
    results: dict[str, list[dict[str, Any]]] = {"raw": [], "A": [], "B": []}
    try:
        for r in range(rounds):
            raw = bench.raw_drain(n)
            results["raw"].append({"jobs_s": raw})
            order = ("A", "B") if r % 2 == 0 else ("B", "A")
            for name in order:
                row = drain(bench, n, with_mover=name == "B")
                results[name].append(row)
                print(f"round {r + 1} {name}: {row}", flush=True)
            print(f"round {r + 1} raw: {raw:.0f} jobs/s", flush=True)
    finally:
        bench.drop_database()
    med = {k: statistics.median(x["jobs_s"] for x in v) for k, v in results.items()}
    cpu = {k: statistics.median(x["cpu_ms"] for x in results[k]) for k in ("A", "B")}
    print(f"median jobs/s: raw {med['raw']:.0f}, A {med['A']:.0f}, B {med['B']:.0f}")
    print(
        f"B/A jobs/s {med['B'] / med['A']:.3f}; A/raw {med['A'] / med['raw']:.3f}; "
        f"B/raw {med['B'] / med['raw']:.3f}"
    )
    print(f"median CPU ms/job: A {cpu['A']:.3f}, B {cpu['B']:.3f} (B/A {cpu['B'] / cpu['A']:.3f})")
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
