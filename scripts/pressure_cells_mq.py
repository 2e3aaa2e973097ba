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

from pressure_phases import run_phases, summary

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
        stopping = threading.Event()
        consumers = [
            threading.Thread(
                target=consumer, args=(bench, pause_ms / 1000.0, stopping), daemon=True
            )
            for _ in range(concurrency)
        ]
        for c in consumers:
            c.start()
        try:
            time.sleep(1)
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
        finally:
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
