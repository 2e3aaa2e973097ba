"""The pressure cells of ``pressure_cells.py`` for the message queues: ours beside pgmq.

- ``pgmq``: pgmq 1.5.1's SQL-only install (``--pgmq-sql path/to/pgmq.sql``) with
  pg_partman (the server needs it: ``postgresql-15-partman`` on Debian), its queue made
  by ``pgmq.create_partitioned('cell', '1 day', '1 day')``: the queue table and the
  archive are both partitioned by day;
- ``mq``: ours, installed by the app's migrations plus its SQL API in schema ``pgmq``
  (``pgqueue_install_sql_api``), the queue made by the same call: only the archive is
  partitioned by day, the queue table is a plain table.

Both are driven by the same client code through the same SQL functions over psycopg
(``pgmq.send``, ``pgmq.read``, ``pgmq.archive``), so only the server side differs. A
producer thread sends at the phase's rate, one message per commit; ``--concurrency``
consumer threads each loop on ``read(vt=30, qty=1)``, sleep ``pause-ms`` and
``archive`` (10 ms of sleep when the read comes back empty), a capacity of about
``concurrency / pause``. The pickup latency of a message is its read's time (its ``vt``
minus the 30 s) minus its ``enqueued_at``, read from the archive after the run.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from pressure_phases import phases, summary

QUEUE = "cell"
VT = 30

TABLES = {  # (queue table, archive) of each configuration
    "pgmq": ("pgmq.q_cell", "pgmq.a_cell"),
    "mq": ("pgqueue_mq_q_cell", "pgqueue_mq_a_cell"),
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
    import subprocess

    with bench.conn() as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        if config == "pgmq" and pgmq_sql is not None:
            conn.execute("CREATE SCHEMA partman")
            conn.execute("CREATE EXTENSION pg_partman SCHEMA partman")
            conn.execute(pgmq_sql.read_text(encoding="utf-8"), prepare=False)
    if config == "mq":
        argv = [*bench._manage(), "pgqueue_install_sql_api", "--schema", "pgmq"]
        subprocess.run(argv, env=bench.child_env(), check=True, stdout=subprocess.DEVNULL)
    with bench.conn() as conn:
        conn.execute("SELECT pgmq.create_partitioned(%s, '1 day', '1 day')", (QUEUE,))
        conn.execute(f"VACUUM ANALYZE {TABLES[config][0]}")


class Producer:
    """Sends ``rate`` messages/s, one per commit; offers, does not catch up."""

    def __init__(self, bench: Any) -> None:
        self.bench, self.rate = bench, 1.0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        body = '{"pause": true}'
        with self.bench.conn() as conn:
            nxt = time.monotonic()
            while not self.stopping.is_set():
                conn.execute(SEND, (QUEUE, body))
                nxt += 1.0 / self.rate
                delay = nxt - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                elif delay < -1.0:
                    nxt = time.monotonic()


def consumer(bench: Any, pause: float, stopping: threading.Event) -> None:
    with bench.conn() as conn:
        while not stopping.is_set():
            row = conn.execute(READ, (QUEUE, VT)).fetchone()
            if row is None:
                time.sleep(0.01)
                continue
            time.sleep(pause)
            conn.execute(ARCHIVE, (QUEUE, row[0]))


def reader(bench: Any, queue: str, stopping: threading.Event) -> None:
    """A long report: REPEATABLE READ transactions of 60 s scanning the queue table."""
    with bench.conn() as conn:
        while not stopping.is_set():
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            began = time.monotonic()
            while not stopping.is_set() and time.monotonic() - began < 60:
                conn.execute(f"SELECT count(*), max(msg_id) FROM {queue}").fetchone()
                stopping.wait(0.5)
            conn.execute("ROLLBACK")


def sampler(bench: Any, queue: str, stopping: threading.Event, samples: list) -> None:
    t0 = time.monotonic()
    query = sample_sql(queue)
    with bench.conn() as conn:
        while not stopping.is_set():
            dead, size, backlog, parts = conn.execute(query).fetchone()
            samples.append(
                [round(time.monotonic() - t0, 1), int(dead), int(size), int(backlog), int(parts)]
            )
            stopping.wait(5)


PICKUP = """SELECT extract(epoch FROM vt - make_interval(secs => %s) - enqueued_at)
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
        stopping, pin_stop = threading.Event(), threading.Event()
        consumers = [
            threading.Thread(
                target=consumer, args=(bench, pause_ms / 1000.0, stopping), daemon=True
            )
            for _ in range(concurrency)
        ]
        for c in consumers:
            c.start()
        time.sleep(1)
        producer = Producer(bench)
        producer.rate = rate
        samples: list[list[float]] = []
        sampling = threading.Thread(
            target=sampler, args=(bench, queue, pin_stop, samples), daemon=True
        )
        producer.thread.start()
        sampling.start()
        bounds: list[tuple[str, Any, Any, float]] = []
        try:
            for name, seconds, load_factor in phases(minutes, scale):
                if only is not None and name not in only:
                    continue
                producer.rate = rate * load_factor if load_factor > 0 else capacity * -load_factor
                with bench.conn() as conn:
                    (start,) = conn.execute("SELECT clock_timestamp()").fetchone()
                pin, readers, readers_stop = None, [], threading.Event()
                if name == "pinned":
                    pin = bench.conn()
                    pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                    pin.execute(f"SELECT 1 FROM {queue} LIMIT 1").fetchall()
                if name == "readers":
                    readers = [
                        threading.Thread(
                            target=reader, args=(bench, queue, readers_stop), daemon=True
                        )
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
                bounds.append((name, start, end, producer.rate))
                print(config, name, "done", time.strftime("%H:%M:%S"), flush=True)
        finally:
            producer.stopping.set()
            pin_stop.set()
            producer.thread.join()
            sampling.join()
            time.sleep(2)
            stopping.set()
            for c in consumers:
                c.join()
        result: dict[str, Any] = {
            "config": config,
            "kind": "mq",
            "minutes": minutes,
            "rate": rate,
            "capacity": capacity,
            "samples": samples,
            "phases": [],
        }
        with bench.conn() as conn:
            for name, a, b, offered in bounds:
                pickups = [
                    float(r[0])
                    for r in conn.execute(PICKUP.format(a=archive), (VT, a, b)).fetchall()
                ]
                (done,) = conn.execute(ARCHIVED.format(a=archive), (a, b)).fetchone()
                (sent,) = conn.execute(SENT.format(a=archive, q=queue), {"a": a, "b": b}).fetchone()
                result["phases"].append(
                    summary(name, a, b, offered, done, pickups, enqueued=sent, picked=len(pickups))
                )
        return result
    finally:
        bench.drop_database()
