"""Pressure cells: the queue under a pinned xmin horizon, long readers and a sustained
overload, with and without the history (docs/performance.md, "Vacuum held back"); and
the message queues, ours beside pgmq's partitioned queue (``pressure_cells_mq.py``).
Measures; asserts nothing.

    DATABASE_URL=postgresql://.../pgq_a python scripts/pressure_cells.py run stay a.json
    DATABASE_URL=postgresql://.../pgq_b python scripts/pressure_cells.py run history b.json
    python scripts/pressure_cells.py report a.json b.json=label --plot-dir docs  # table, plot

    DATABASE_URL=postgresql://.../cells_pgmq python scripts/pressure_cells.py run pgmq \
        p.json --pgmq-sql path/to/pgmq.sql  # pgmq 1.5.1 with pg_partman
    DATABASE_URL=postgresql://.../cells_mq python scripts/pressure_cells.py run mq m.json
    DATABASE_URL=postgresql://.../cells_w python scripts/pressure_cells.py run workers w.json
    python scripts/pressure_cells.py report m.json p.json --plot-dir docs  # pressure_cells_mq.svg

``run`` takes ``--minutes`` (the pinned and readers phases, default 10), ``--rate``
(jobs/s offered, default 100), ``--pause-ms`` (each job's duration, default 20) and
``--concurrency`` (default 4); the ``pgmq`` configuration needs ``--pgmq-sql``.
Two configurations run side by side in two databases
(each uses its own scratch database ``<name>_bench``): a pinned horizon holds back
vacuum in its own database only.

- ``stay``: ``HISTORY_DELAY_SECONDS = None``, finished jobs stay in ``pgqueue_job``
  (the previous release between two prunes);
- ``history``: the default settings (the mover files finished jobs after 30 s);
- ``pgmq`` and ``mq``: a message queue made by ``pgmq.create_partitioned('cell',
  '1 day', '1 day')``, pgmq's or ours (its SQL API), a producer ``send``-ing and
  ``--concurrency`` consumers each reading one message, sleeping ``pause-ms`` and
  archiving it, through the same phases (see ``pressure_cells_mq.py``);
- ``workers``: ours again, read by a ``runworkers`` process's consumer
  (``--concurrency`` threads) instead of the SQL API's ``read``: the worker's own
  reads, above its scan floor.

One ``runworkers`` process serves jobs that sleep ``pause-ms``, so its capacity is about
``concurrency / pause`` (200 jobs/s by default), under a steady offered load, through:

1. ``clean`` (2 min): nothing else runs;
2. ``pinned`` (``--minutes``): one session idle in a ``REPEATABLE READ`` transaction,
   its snapshot pinning the xmin horizon;
3. ``readers`` (``--minutes``): four ``REPEATABLE READ`` readers scanning
   ``pgqueue_job`` twice a second, each in transactions of 60 s;
4. ``after`` (2 min): recovery from the pin and the readers;
5. ``overload`` (3 min): 1.5x the worker's capacity offered;
6. ``recovery`` (5 min): the steady load again, until the backlog is gone.

Sampled every 5 s: dead tuples and size of ``pgqueue_job`` (``pgstattuple``) and the
backlog (pending jobs). Per phase: jobs finished per second, and the pickup latency
(``started_at - created_at``: wake-up, wait in the backlog and claim) p50/p95/p99 of the
jobs enqueued in it. Each job is followed by a NOTIFY with the payload an enqueue sends
(``--wake jobs``, the default), or none (``--wake all``: it wakes every source of the
worker, four claims per job, as in the runs before 2026-12-07).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pressure_phases import drained_after, phase_rows, phase_spans, run_phases, summary

REPO = Path(__file__).resolve().parent.parent

INSERT_JOB = """INSERT INTO pgqueue_job (status, priority, attempts, max_attempts,
    next_attempt_at, worker_id, last_error, errors, created_at, updated_at, task_path,
    queue_name, backend, args, kwargs, worker_ids, atomic)
VALUES ('pending', 0, 0, 1, clock_timestamp(), '', '', '[]', clock_timestamp(),
    clock_timestamp(), 'django_pgqueue.bench.tasks.pause', 'default', 'default', %s, '{}',
    '[]', false)"""

WAKE = "SELECT pg_notify(%s, %s)"

PICKUP = """SELECT extract(epoch FROM started_at - created_at) FROM (
    SELECT created_at, started_at FROM pgqueue_job WHERE started_at IS NOT NULL
    UNION ALL SELECT created_at, started_at FROM pgqueue_job_history) AS j
WHERE created_at >= %s AND created_at < %s"""

FINISHED = """SELECT (SELECT count(*) FROM pgqueue_job WHERE finished_at >= %(a)s
                                                 AND finished_at < %(b)s)
     + (SELECT count(*) FROM pgqueue_job_history WHERE finished_at >= %(a)s
                                                 AND finished_at < %(b)s)"""

SAMPLE = """SELECT dead_tuple_count, table_len,
    (SELECT count(*) FROM pgqueue_job WHERE status = 'pending')
FROM pgstattuple('pgqueue_job')"""


def setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    sys.path.insert(0, str(REPO))
    import django

    django.setup()


def run_mq(config: str, out: Path, pgmq_sql: Path | None, **kwargs: Any) -> None:
    """The message-queue cells (``pgmq``, ``mq``, ``workers``): see ``pressure_cells_mq.py``."""
    setup()
    import pressure_cells_mq

    result = pressure_cells_mq.run(config, pgmq_sql=pgmq_sql, **kwargs)
    result["load"] = os.getloadavg()
    out.write_text(json.dumps(result))
    print(f"wrote {out}")


def run(
    config: str,
    out: Path,
    minutes: float,
    rate: float,
    pause_ms: float,
    concurrency: int,
    scale: float,
    wake: str,
    only: set[str] | None = None,
) -> None:
    setup()
    from django_pgqueue.bench.core import Bench, stop
    from django_pgqueue.conf import get_settings
    from django_pgqueue.notify import WAKE_ALL, WAKE_JOBS

    capacity = concurrency * 1000.0 / pause_ms
    bench = Bench(only=["drain"], out=print)
    bench.create_database()
    try:
        with bench.conn() as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
            conn.execute("VACUUM ANALYZE pgqueue_job")
        env = {"PGQUEUE_JOB_LOG": "summary"}
        if config == "stay":
            env["PGQUEUE_HISTORY_DELAY_SECONDS"] = "none"
        argv = [*bench._manage(), "runworkers", "--skip-checks"]
        argv += ["--concurrency", str(concurrency)]
        worker = subprocess.Popen(argv, env=bench.child_env(**env), stdout=subprocess.DEVNULL)
        try:
            time.sleep(3)  # start-up is not a phase's latency
            job_args = json.dumps([pause_ms / 1000.0])
            notify = (get_settings().NOTIFY_CHANNEL, WAKE_JOBS if wake == "jobs" else WAKE_ALL)

            def send(conn: Any) -> None:
                conn.execute(INSERT_JOB, (job_args,))
                conn.execute(WAKE, notify)  # as an enqueue does: the pickup is not the poll

            bounds, samples = run_phases(
                bench,
                config,
                send,
                table="pgqueue_job",
                key="id",
                sample=SAMPLE,
                minutes=minutes,
                rate=rate,
                capacity=capacity,
                scale=scale,
                only=only,
            )
        finally:
            stop(worker)
        result: dict[str, Any] = {
            "config": config,
            "minutes": minutes,
            "rate": rate,
            "wake": wake,
            "capacity": capacity,
            "samples": samples,
            "phases": [],
            "load": os.getloadavg(),
        }
        with bench.conn() as conn:
            for name, a, b, offered in bounds:
                pickups = [float(r[0]) for r in conn.execute(PICKUP, (a, b)).fetchall()]
                (done,) = conn.execute(FINISHED, {"a": a, "b": b}).fetchone()
                result["phases"].append(
                    summary(name, a, b, offered, done, pickups, enqueued=len(pickups))
                )
        out.write_text(json.dumps(result))
        print(f"wrote {out}")
    finally:
        bench.drop_database()


def report(paths: list[str], plot_dir: Path | None) -> None:
    results = []
    for path in paths:  # PATH or PATH=LABEL
        name, _, label = str(path).partition("=")
        result = json.loads(Path(name).read_text())
        result["config"] = label or result["config"]
        results.append(result)
    if results[0].get("kind") == "mq":
        report_mq(results)
    else:
        report_jobs(results)
    if plot_dir is not None:
        plot(results, plot_dir)


def report_jobs(results: list[dict[str, Any]]) -> None:
    print(
        "| config | phase | offered jobs/s | done jobs/s | pickup p50 ms | p95 ms | p99 ms "
        "| dead tuples (max) | backlog (max) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for res in results:
        for name, p, dead, backlog in phase_rows(res):
            print(
                f"| {res['config']} | {name} | {p['offered']:.0f} | {p['jobs_s']:.0f} | "
                f"{p['p50_ms']:.0f} | {p['p95_ms']:.0f} | {p['p99_ms']:.0f} | {dead:,} | "
                f"{backlog:,} |"
            )
        spans = {n: (a, b) for n, a, b in phase_spans(res)}
        over_end = spans["overload"][1]
        drained = drained_after(res, over_end)
        end = res["samples"][-1]
        print(
            f"| {res['config']} | end | | | | | | {end[1]:,} (table {end[2] // 1024:,} kB) "
            f"| backlog gone {drained - over_end:.0f} s after the overload |"
            if drained
            else f"| {res['config']} | end | backlog not drained |"
        )


def ms(value: float) -> str:
    return "-" if value != value else f"{value:,.0f}"  # NaN: nothing of the phase was read


def report_mq(results: list[dict[str, Any]]) -> None:
    """As the jobs' table, with how many of each phase's messages were read by the end
    (the pickup percentiles are of those only), and when the backlog was gone."""
    print(
        "| config | phase | offered msgs/s | archived msgs/s | pickup p50 ms | p95 ms "
        "| p99 ms | read by the end | dead tuples (max) | backlog (max) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for res in results:
        for name, p, dead, backlog in phase_rows(res):
            print(
                f"| {res['config']} | {name} | {p['offered']:.0f} | {p['jobs_s']:.0f} | "
                f"{ms(p['p50_ms'])} | {ms(p['p95_ms'])} | {ms(p['p99_ms'])} | "
                f"{p['picked']:,} of {p['enqueued']:,} | {dead:,} | {backlog:,} |"
            )
        spans = {n: (a, b) for n, a, b in phase_spans(res)}
        gone = []
        for after in ("pinned", "readers", "overload"):
            if after in spans:
                t = spans[after][1]
                drained = drained_after(res, t)
                gone.append(f"{after} +{drained - t:.0f} s" if drained else f"{after} never")
        end = res["samples"][-1]
        print(
            f"| {res['config']} | end | | | | | | | {end[1]:,} (table {end[2] // 1024:,} kB) "
            f"| {end[3]:,}; under 50 again after: {', '.join(gone)} |"
        )


def plot(results: list[dict[str, Any]], plot_dir: Path) -> None:
    mq = results[0].get("kind") == "mq"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    for res in results:
        xs = [s[0] / 60 for s in res["samples"]]
        axes[0].plot(xs, [s[1] for s in res["samples"]], label=res["config"])
        axes[1].plot(xs, [s[3] for s in res["samples"]], label=res["config"])
    for name, a, _b in phase_spans(results[0]):
        for ax in axes:
            ax.axvline(a / 60, color="grey", linestyle=":", linewidth=0.8)
        axes[0].annotate(
            name, (a / 60, 1.0), xycoords=("data", "axes fraction"), fontsize=8, va="bottom"
        )
    axes[0].set_ylabel("dead tuples, queue table" if mq else "dead tuples, pgqueue_job")
    axes[1].set_ylabel("backlog (queue length)" if mq else "backlog (pending jobs)")
    axes[1].set_xlabel("minutes")
    axes[0].legend()
    fig.tight_layout()
    path = plot_dir / ("pressure_cells_mq.svg" if mq else "pressure_cells.svg")
    fig.savefig(path)
    print(f"plot written to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("config", choices=("stay", "history", "pgmq", "mq", "workers"))
    r.add_argument("out", type=Path)
    r.add_argument("--minutes", type=float, default=10)
    r.add_argument("--rate", type=float, default=100)
    r.add_argument("--pause-ms", type=float, default=20)
    r.add_argument("--concurrency", type=int, default=4)
    r.add_argument("--scale", type=float, default=1.0, help="of the fixed phases' lengths")
    r.add_argument(
        "--wake",
        choices=("jobs", "all"),
        default="jobs",
        help="the producer's NOTIFY payload: 'jobs', as an enqueue sends (wakes the job "
        "claims only), or 'all', none (wakes every source, as the runs before 2026-12-07)",
    )
    r.add_argument(
        "--pgmq-sql",
        type=Path,
        help="pgmq's SQL-only install (pgmq.sql), needed by the pgmq configuration",
    )
    r.add_argument(
        "--phases",
        help="comma-separated phases to run, in their order (default: all six); "
        "the report needs clean, overload and recovery",
    )
    rep = sub.add_parser("report")
    rep.add_argument("results", nargs="+", help="result files, each as PATH or PATH=LABEL")
    rep.add_argument("--plot-dir", type=Path)
    args = parser.parse_args()
    only = set(args.phases.split(",")) if args.command == "run" and args.phases else None
    if args.command == "run" and args.config == "pgmq" and args.pgmq_sql is None:
        parser.error("the pgmq configuration needs --pgmq-sql")
    if args.command == "run" and args.config in ("pgmq", "mq", "workers"):
        run_mq(
            args.config,
            args.out,
            args.pgmq_sql,
            minutes=args.minutes,
            rate=args.rate,
            pause_ms=args.pause_ms,
            concurrency=args.concurrency,
            scale=args.scale,
            only=only,
        )
    elif args.command == "run":
        run(
            args.config,
            args.out,
            args.minutes,
            args.rate,
            args.pause_ms,
            args.concurrency,
            args.scale,
            args.wake,
            only,
        )
    else:
        report(args.results, args.plot_dir)


if __name__ == "__main__":
    main()
