"""The steady-rate pickup rows of ``pgqueue_bench``: jobs offered at a fixed rate to an
otherwise idle worker, and how long each waits from its enqueue to its start.

The wake-up rows (``latency``) time one job at a time, 100 ms apart, so every job
finds an idle worker and a fresh NOTIFY window. Here the producer offers
``pickup_rate`` jobs a second, one per commit, for ``pickup_seconds``: far below
what a worker drains, so the worker is idle between jobs, but fast enough that
every NOTIFY window holds jobs. That is the shape of a web application's traffic,
and the one where coalescing, the claim loop's sleep and the task thread's hand-off
show up.

The producer keeps an absolute schedule (a late job does not push the next ones
back). A probe job writes ``seq t_enqueue t_start`` (``bench/tasks.py``); the
first ``PICKUP_WARM_UP`` seconds are not counted.

Each side also reports its CPU per job over the offered period: the consumer's
process (the worker; the raw consumer's thread) plus its PostgreSQL backends
(``/proc``, Linux only). That figure moves far less with the machine's load than
the latencies do. The producer is the same on both sides and is not counted.

The ceiling, in the same repetition and shape: a raw psycopg producer that
INSERTs a row and NOTIFYs in the same transaction, and a raw consumer thread that
LISTENs and claims with one ``SKIP LOCKED`` UPDATE as soon as it hears anything.
It takes the time when the claim returns. It does no work, starts no thread and
commits no completion.

pgmq, when ``--pgmq-sql`` names its SQL-only install file (``pgmq.sql``, which
this project does not ship): installed in the scratch database, in the same shape
and repetition. A producer calls ``pgmq.send`` once per commit; a consumer thread
loops on ``pgmq.read_with_poll`` (up to 100 messages, a 30 s visibility timeout,
polling every ``--pgmq-poll-ms``, 10 by default) and deletes what it read, which
is pgmq's own consumer: it has no LISTEN. Its latency is the read's return minus
the clock read before ``send``; its CPU, that thread's and its session's.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import sql
from ..db import connect
from .probes import read_latencies, stop, warm_up

#: The running benchmark (``core.Bench``), which imports this module to run it:
#: typed loosely here so that neither module imports the other.
Bench = Any

PICKUP_WARM_UP = 0.5
RAW_CHANNEL = "pgqueue_bench_pickup"
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

#: The worker's sessions (db.connect names them ``pgqueue-<purpose>-<worker id>``).
WORKER_BACKENDS = """SELECT pid FROM pg_catalog.pg_stat_activity
WHERE datname = current_database()
  AND (application_name LIKE 'pgqueue-worker-%%' OR application_name LIKE 'pgqueue-listen-%%'
       OR application_name LIKE 'pgqueue-complete-%%')"""

#: The raw producer: the row the raw drain claims, with its enqueue time in ``args``,
#: and the NOTIFY in the same transaction (one statement, autocommit).
RAW_PICKUP_INSERT = f"""WITH job AS (
    INSERT INTO {sql.JOB_TABLE} (
        status, priority, attempts, max_attempts, next_attempt_at, worker_id, last_error,
        errors, created_at, updated_at, task_path, queue_name, backend, args, kwargs,
        worker_ids
    ) VALUES ('pending', 0, 0, 5, now(), '', '', '[]', now(), now(), 'raw', 'default',
              'raw', %s, '{{}}', '[]')
    RETURNING id)
SELECT pg_catalog.pg_notify(%s, '') FROM job"""  # noqa: S608 - identifiers are module constants

#: The raw consumer's claim: every due row, in one statement.
RAW_PICKUP_CLAIM = f"""UPDATE {sql.JOB_TABLE} SET status = 'in_progress',
    attempts = attempts + 1, locked_by = gen_random_uuid(),
    locked_until = now() + interval '30 seconds', started_at = now()
WHERE id IN (
    SELECT id FROM {sql.JOB_TABLE}
    WHERE status = 'pending' AND next_attempt_at <= now()
    ORDER BY priority DESC, next_attempt_at, id
    LIMIT 100 FOR UPDATE SKIP LOCKED)
RETURNING args"""  # noqa: S608 - identifiers are module constants


def bench_pickup(bench: Bench) -> None:
    from .rows import Row

    label = f"{bench.pickup_rate:g} jobs/s offered, 1 per commit, {bench.pickup_seconds:g} s"
    rows = {
        p: bench.add(
            Row(
                "steady-rate pickup",
                f"{p}, {label}",
                "ms",
                reference="raw LISTEN + SKIP LOCKED claim",
                better="lower",
                extra={"rate": bench.pickup_rate, "seconds": bench.pickup_seconds},
            )
        )
        for p in ("p50", "p99")
    }
    cpu = bench.add(
        Row(
            "steady-rate pickup",
            f"consumer CPU per job, {label}",
            "µs",
            reference="raw LISTEN + SKIP LOCKED claim",
            better="lower",
            extra={"rate": bench.pickup_rate, "seconds": bench.pickup_seconds},
        )
    )
    pgmq_rows: dict[str, Row] = {}
    if bench.pgmq_sql:
        install_pgmq(bench)
        pgmq_label = f"pgmq read_with_poll every {bench.pgmq_poll_ms} ms + delete"
        pgmq_rows = {
            name: bench.add(
                Row(
                    "steady-rate pickup",
                    f"{name}, {label}",
                    unit,
                    reference=pgmq_label,
                    better="lower",
                    extra={
                        "rate": bench.pickup_rate,
                        "seconds": bench.pickup_seconds,
                        "pgmq_poll_ms": bench.pgmq_poll_ms,
                    },
                )
            )
            for name, unit in (("p50", "ms"), ("p99", "ms"), ("consumer CPU per job", "µs"))
        }
    for rep in range(bench.repeat):
        raw, raw_cpu = raw_pickup(bench)
        ours, our_cpu = worker_pickup(bench)
        for p, q in (("p50", 50), ("p99", 99)):
            rows[p].ref_values.append(pctl(raw, q))
            rows[p].values.append(pctl(ours, q))
        cpu.ref_values.append(raw_cpu)
        cpu.values.append(our_cpu)
        line = (
            f"   rep {rep + 1}: ours p50 {pctl(ours, 50):.1f} / p99 {pctl(ours, 99):.1f} ms, "
            f"{our_cpu:.0f} µs CPU per job ({len(ours)} jobs); raw p50 {pctl(raw, 50):.1f} / "
            f"p99 {pctl(raw, 99):.1f} ms, {raw_cpu:.0f} µs"
        )
        if pgmq_rows:
            theirs, their_cpu = pgmq_pickup(bench)
            for p, q in (("p50", 50), ("p99", 99)):
                pgmq_rows[p].ref_values.append(pctl(theirs, q))
                pgmq_rows[p].values.append(pctl(ours, q))
            pgmq_rows["consumer CPU per job"].ref_values.append(their_cpu)
            pgmq_rows["consumer CPU per job"].values.append(our_cpu)
            line += (
                f"; pgmq p50 {pctl(theirs, 50):.1f} / p99 {pctl(theirs, 99):.1f} ms, "
                f"{their_cpu:.0f} µs"
            )
        bench.out(line)


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of these processes (0 for one that is gone or unreadable)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rpartition(")")[2].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICK


def worker_backends(bench: Bench) -> list[int]:
    with bench.conn() as conn:
        return [pid for (pid,) in conn.execute(WORKER_BACKENDS).fetchall()]


def pctl(values: list[float], q: float) -> float:
    from .rows import pctl as rows_pctl

    return float(rows_pctl(values, q))


def paced(rate: float, seconds: float) -> Any:
    """Yield ``seq`` on an absolute schedule of ``rate`` per second for ``seconds``."""
    n = int(rate * seconds)
    start = time.perf_counter()
    for seq in range(n):
        delay = start + seq / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        yield seq


def worker_pickup(bench: Bench) -> tuple[list[float], float]:
    """Offer probes to a real ``runworkers`` at the configured rate: (ms per job,
    consumer CPU µs per job)."""
    from django.db import connections

    bench.reset()
    fd, path = tempfile.mkstemp(prefix="pgqueue-bench-pickup-")
    os.close(fd)
    argv = [*bench._manage(), "runworkers", "--skip-checks"]
    probe = bench.tasks().probe.using(backend=bench.backend_alias)
    proc = subprocess.Popen(argv, env=bench.child_env(), start_new_session=True)
    n = int(bench.pickup_rate * bench.pickup_seconds)
    try:
        warm_up(probe, path)
        time.sleep(0.5)
        consumer = [proc.pid, *worker_backends(bench)]
        cpu0 = cpu_seconds(consumer)
        for seq in paced(bench.pickup_rate, bench.pickup_seconds):
            probe.enqueue(path, seq, time.time())
        deadline = time.monotonic() + 60
        while len(read_latencies(path)) < n + 1:
            if time.monotonic() > deadline:
                raise RuntimeError("pickup probes did not all run within 60 s")
            time.sleep(0.05)
        cpu = cpu_seconds(consumer) - cpu0
    finally:
        stop(proc)
        connections.close_all()
    lat = read_latencies(path)
    os.unlink(path)
    skip = int(bench.pickup_rate * PICKUP_WARM_UP)
    return sorted(v for seq, v in lat.items() if seq >= skip), cpu / n * 1e6


def raw_pickup(bench: Bench) -> tuple[list[float], float]:
    """The ceiling in the same shape, raw producer and raw LISTEN + claim consumer:
    (ms per job, consumer CPU µs per job)."""
    bench.reset()

    def setup(conn: Any) -> None:
        conn.execute(f"LISTEN {RAW_CHANNEL}")

    def consume(conn: Any, n: int, latencies: list[float], done: threading.Event) -> None:
        heard = [0]
        conn.add_notify_handler(lambda _notice: heard.__setitem__(0, heard[0] + 1))
        got, seen = 0, -1
        while got < n and not done.is_set():
            if seen == heard[0]:
                # Nothing heard since the last claim: wait for the socket (a NOTIFY
                # read during a claim is counted by the handler). The claim itself
                # reads what woke the socket.
                select.select([conn.fileno()], [], [], 0.05)
            seen = heard[0]
            rows = conn.execute(RAW_PICKUP_CLAIM).fetchall()
            now = time.time()
            for (args,) in rows:
                seq, t_enqueue = args
                if seq >= 0:
                    latencies.append((now - t_enqueue) * 1000)
                got += 1
            if rows:
                seen = -1  # claim again at once, as a worker does after a batch

    def produce(conn: Any, seq: int) -> None:
        conn.execute(RAW_PICKUP_INSERT, (json.dumps([seq, time.time()]), RAW_CHANNEL))

    return consumer_beside_producer(bench, setup, consume, produce)


def consumer_beside_producer(
    bench: Bench,
    setup: Callable[[Any], None],
    consume: Callable[[Any, int, list[float], threading.Event], None],
    produce: Callable[[Any, int], None],
) -> tuple[list[float], float]:
    """Run ``consume`` on a thread with its own session while this thread offers the
    probes through ``produce``, one per commit, at ``bench.pickup_rate``.

    Returns the latencies after the warm-up, sorted, and the consumer's CPU per job
    (its thread plus its session's backend), in µs."""
    n = int(bench.pickup_rate * bench.pickup_seconds)
    latencies: list[float] = []
    ready = threading.Event()
    done = threading.Event()
    errors: list[BaseException] = []
    spent: list[float] = []

    def run() -> None:
        try:
            with bench.conn() as conn:
                conn.autocommit = True
                setup(conn)
                backend = [int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])]
                cpu0 = time.thread_time() + cpu_seconds(backend)
                ready.set()
                consume(conn, n, latencies, done)
                spent.append(time.thread_time() + cpu_seconds(backend) - cpu0)
        except BaseException as exc:  # reported by the producer
            errors.append(exc)
            ready.set()

    consumer = threading.Thread(target=run, name="pickup-consumer", daemon=True)
    consumer.start()
    ready.wait(30)
    try:
        with bench.conn() as conn:
            conn.autocommit = True
            for seq in paced(bench.pickup_rate, bench.pickup_seconds):
                produce(conn, seq)
        consumer.join(60)
    finally:
        done.set()
    if errors:
        raise errors[0]
    skip = int(bench.pickup_rate * PICKUP_WARM_UP)
    return sorted(latencies[skip:]), (spent[0] if spent else float("nan")) / n * 1e6


#: The pgmq queue of the yardstick consumer (``--pgmq-sql``).
PGMQ_QUEUE = "pgqueue_bench_pickup"
PGMQ_SEND = "SELECT pgmq.send(%s, %s::jsonb)"
PGMQ_READ = "SELECT msg_id, message FROM pgmq.read_with_poll(%s, 30, 100, 1, %s)"
PGMQ_DELETE = "SELECT pgmq.delete(%s, %s::bigint[])"


def install_pgmq(bench: Bench) -> None:
    """Install pgmq from ``bench.pgmq_sql`` into the scratch database, with its queue.

    The file is pgmq's SQL-only install (it creates the ``pgmq`` schema); the scratch
    database is dropped after the run, and pgmq with it."""
    with open(bench.pgmq_sql, encoding="utf-8") as fh:
        script = fh.read()
    with connect("bench-pgmq", alias=bench.alias, prepare=False) as conn:
        if conn.execute("SELECT to_regnamespace('pgmq')").fetchone() == (None,):
            conn.execute(script)  # no parameters: the whole file in one simple query
        conn.execute("SELECT pgmq.create(%s)", (PGMQ_QUEUE,))


def pgmq_pickup(bench: Bench) -> tuple[list[float], float]:
    """pgmq in the same shape: (ms per message, consumer CPU µs per message)."""
    with bench.conn() as conn:
        conn.execute("SELECT pgmq.purge_queue(%s)", (PGMQ_QUEUE,))

    def consume(conn: Any, n: int, latencies: list[float], done: threading.Event) -> None:
        got = 0
        while got < n and not done.is_set():
            rows = conn.execute(PGMQ_READ, (PGMQ_QUEUE, bench.pgmq_poll_ms)).fetchall()
            now = time.time()
            for _msg_id, (_seq, t_enqueue) in rows:
                latencies.append((now - t_enqueue) * 1000)
                got += 1
            if rows:
                conn.execute(PGMQ_DELETE, (PGMQ_QUEUE, [row[0] for row in rows]))

    def produce(conn: Any, seq: int) -> None:
        conn.execute(PGMQ_SEND, (PGMQ_QUEUE, json.dumps([seq, time.time()])))

    return consumer_beside_producer(bench, lambda _conn: None, consume, produce)
