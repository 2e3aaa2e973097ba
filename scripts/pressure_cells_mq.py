"""The pressure cells of ``pressure_cells.py`` for the message queues: ours beside pgmq.

- ``pgmq``: pgmq 1.5.1's SQL-only install (``--pgmq-sql path/to/pgmq.sql``) with
  pg_partman (the server needs it: ``postgresql-15-partman`` on Debian), its queue made
  by ``pgmq.create_partitioned('cell', '1 day', '1 day')``: the queue table and the
  archive are both partitioned by day;
- ``mq``: ours, installed by the app's migrations plus its SQL API in schema ``pgmq``
  (``pgqueue_install_sql_api``), the queue made by the same call: only the archive is
  partitioned by day, the queue table is a plain table.

- ``workers``: ours as in ``mq``, its messages read by a ``runworkers`` process's
  consumer (``testproject/demo/cell.py``, registered by the demo app when
  ``PRESSURE_CELL_PAUSE_MS`` is set) that sleeps ``pause-ms`` a message, with
  ``--concurrency`` threads: the worker's own reads, above its scan floor, and its
  archive of each message handled.

The first two are driven by the same client code through the same SQL functions over psycopg
(``pgmq.send``, ``pgmq.read``, ``pgmq.archive``), so only the server side differs. A
producer thread sends at the phase's rate, one message per commit; ``--concurrency``
consumer threads each loop on ``read(vt=30, qty=1)``, sleep ``pause-ms`` and
``archive`` (10 ms of sleep when the read comes back empty), a capacity of about
``concurrency / pause``. The pickup latency of a message is its read's time (its ``vt``
minus the 30 s) minus its ``enqueued_at``, read from the archive after the run.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pressure_phases import run_phases, summary

QUEUE = "cell"
VT = 30

TABLES = {  # (queue table, archive) of each configuration
    "pgmq": ("pgmq.q_cell", "pgmq.a_cell"),
    "mq": ("pgqueue_mq_q_cell", "pgqueue_mq_a_cell"),
    "workers": ("pgqueue_mq_q_cell", "pgqueue_mq_a_cell"),
}

SEND = "SELECT pgmq.send(%s, %s::jsonb)"
READ = "SELECT msg_id FROM pgmq.read(%s, %s, 1)"
ARCHIVE = "SELECT pgmq.archive(%s, %s::bigint)"


def sample_sql(queue: str) -> str:
    """Dead tuples and size summed over the queue table's partitions (over the table
    itself if it is not partitioned), the queue length and the number of tables summed."""
    return f"""WITH t AS (
    SELECT relid FROM pg_partition_tree('{queue}') WHERE isleaf
    UNION ALL SELECT '{queue}'::regclass WHERE NOT EXISTS (SELECT FROM pg_partition_tree('{queue}'))
)
SELECT coalesce(sum(s.dead_tuple_count), 0), coalesce(sum(s.table_len), 0),
    (SELECT count(*) FROM {queue}), count(*)
FROM t, LATERAL pgstattuple(t.relid) AS s"""


def install(config: str, bench: Any, pgmq_sql: Path | None) -> None:
    """pgmq's SQL with pg_partman, or our SQL API; then the queue, by the same call."""
    with bench.conn() as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        if config == "pgmq" and pgmq_sql is not None:
            conn.execute("CREATE SCHEMA partman")
            conn.execute("CREATE EXTENSION pg_partman SCHEMA partman")
            conn.execute(pgmq_sql.read_text(encoding="utf-8"), prepare=False)
    if config in ("mq", "workers"):
        argv = [*bench._manage(), "pgqueue_install_sql_api", "--schema", "pgmq"]
        subprocess.run(argv, env=bench.child_env(), check=True, stdout=subprocess.DEVNULL)
    with bench.conn() as conn:
        conn.execute("SELECT pgmq.create_partitioned(%s, '1 day', '1 day')", (QUEUE,))
        conn.execute(f"VACUUM ANALYZE {TABLES[config][0]}")


def send(conn: Any) -> None:
    """One message, in its own commit."""
    conn.execute(SEND, (QUEUE, '{"pause": true}'))


def consumer(bench: Any, pause: float, stopping: threading.Event) -> None:
    with bench.conn() as conn:
        while not stopping.is_set():
            row = conn.execute(READ, (QUEUE, VT)).fetchone()
            if row is None:
                time.sleep(0.01)
                continue
            time.sleep(pause)
            conn.execute(ARCHIVE, (QUEUE, row[0]))


@contextlib.contextmanager
def consumers(config: str, bench: Any, pause_ms: float, concurrency: int) -> Iterator[None]:
    """The readers of the queue while the phases run: ``concurrency`` client threads
    (``pgmq``, ``mq``), or one ``runworkers`` process with that many threads, its
    consumer sleeping ``pause_ms`` a message (``workers``: testproject/demo/cell.py)."""
    if config == "workers":
        argv = [*bench._manage(), "runworkers", "--skip-checks", "--concurrency", str(concurrency)]
        env = bench.child_env(PRESSURE_CELL_PAUSE_MS=str(pause_ms))
        worker = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
        try:
            time.sleep(3)  # start-up is not a phase's latency
            yield
        finally:
            worker.terminate()
            worker.wait(timeout=60)
        return
    stopping = threading.Event()
    threads = [
        threading.Thread(target=consumer, args=(bench, pause_ms / 1000.0, stopping), daemon=True)
        for _ in range(concurrency)
    ]
    for t in threads:
        t.start()
    try:
        time.sleep(1)
        yield
    finally:
        stopping.set()
        for t in threads:
            t.join()


#: A message's pickup latency: when its (last) read began, less when it was sent. The
#: client threads read with ``vt`` VT, so their read began VT seconds before its ``vt``;
#: the worker's reads set ``last_read_at`` (pgmq 1.5.1 has no such column).
PICKUP = """SELECT extract(epoch FROM vt - make_interval(secs => %s) - enqueued_at)
FROM {a} WHERE enqueued_at >= %s AND enqueued_at < %s"""
PICKUP_WORKERS = """SELECT extract(epoch FROM last_read_at - enqueued_at) + 0 * %s
FROM {a} WHERE enqueued_at >= %s AND enqueued_at < %s"""
ARCHIVED = "SELECT count(*) FROM {a} WHERE archived_at >= %s AND archived_at < %s"
SENT = "SELECT (SELECT count(*) FROM {a} WHERE enqueued_at >= %(a)s AND enqueued_at < %(b)s)"
SENT += " + (SELECT count(*) FROM {q} WHERE enqueued_at >= %(a)s AND enqueued_at < %(b)s)"


def run(
    config: str,
    minutes: float,
    rate: float,
    pause_ms: float,
    concurrency: int,
    scale: float,
    only: set[str] | None,
    pgmq_sql: Path | None,
) -> dict[str, Any]:
    from django_pgqueue.bench.core import Bench

    queue, archive = TABLES[config]
    capacity = concurrency * 1000.0 / pause_ms
    bench = Bench(only=["drain"], out=print)
    bench.create_database()
    try:
        install(config, bench, pgmq_sql)
        with consumers(config, bench, pause_ms, concurrency):
            bounds, samples = run_phases(
                bench,
                config,
                send,
                table=queue,
                key="msg_id",
                sample=sample_sql(queue),
                minutes=minutes,
                rate=rate,
                capacity=capacity,
                scale=scale,
                only=only,
            )
        result: dict[str, Any] = {
            "config": config,
            "kind": "mq",
            "minutes": minutes,
            "rate": rate,
            "capacity": capacity,
            "samples": samples,
            "phases": [],
        }
        pickup = PICKUP_WORKERS if config == "workers" else PICKUP
        with bench.conn() as conn:
            for name, a, b, offered in bounds:
                pickups = [
                    float(r[0])
                    for r in conn.execute(pickup.format(a=archive), (VT, a, b)).fetchall()
                ]
                (done,) = conn.execute(ARCHIVED.format(a=archive), (a, b)).fetchone()
                (sent,) = conn.execute(SENT.format(a=archive, q=queue), {"a": a, "b": b}).fetchone()
                result["phases"].append(
                    summary(name, a, b, offered, done, pickups, enqueued=sent, picked=len(pickups))
                )
        return result
    finally:
        bench.drop_database()
