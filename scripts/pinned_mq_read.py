"""A message queue consumer's read under a held-back xmin horizon: its time as
archived messages pile up since the pin, full (from the primary key's head) and
floored (``mq/sql.py``, ``_FLOOR``), beside the same run without a pin
(docs/performance.md, "Message queue reads under a pinned horizon"). Measures;
asserts nothing.

    DATABASE_URL=postgresql://.../name python scripts/pinned_mq_read.py

Each case runs in a scratch database (``<name>_bench``, made and dropped here) with
one queue. In ``pinned``, one session idles in a ``REPEATABLE READ`` transaction,
its snapshot holding back the horizon in that database, from before the first read.
Then, in steps, messages are sent, read and archived by SQL, as busy consumers leave
them (``--step`` in the first step, default 10,000; step *k* *k* times that). After
each step, ten times: one message is sent, read by the worker's own call
(``mq.store.claim``, on a connection opened as the worker opens its own), and
archived; the medians of both kinds of read are printed. ``--steps`` (default 7).
The floored reads look two seconds back, and the timed reads start ``SETTLE``
seconds after a step's churn: a steady stream of messages leaves its last few
seconds' dead versions there, not a step's burst.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from pinned_horizon import run_both

QUEUE = "pinned"
TABLE, ARCHIVE = f"pgqueue_mq_q_{QUEUE}", f"pgqueue_mq_a_{QUEUE}"
#: Seconds between a step's churn and the timed reads: past the floored reads' window.
SETTLE = 3.0


def churn(conn: Any, n: int, columns: str) -> None:
    """``n`` messages sent, read once and archived: dead versions under the head."""
    conn.execute(
        f"INSERT INTO {TABLE} (vt, message) SELECT clock_timestamp(), '{{}}'::jsonb"
        " FROM generate_series(1, %s)",
        [n],
    )
    conn.execute(f"UPDATE {TABLE} SET vt = clock_timestamp() + interval '30 s', read_ct = 1")
    conn.execute(
        f"WITH gone AS (DELETE FROM {TABLE} RETURNING *)"
        f" INSERT INTO {ARCHIVE} ({columns}) SELECT {columns} FROM gone"
    )


def timed_read(worker: Any, floor: float | None) -> float:
    """One message sent, then read (full, or above ``floor`` seconds) and archived."""
    from django_pgqueue import mq
    from django_pgqueue.mq import store

    info = store.get_queue(QUEUE)
    (sent,) = mq.send_batch(QUEUE, [{"n": 1}])
    query, params = store.read_query(info, 30, 1, floor)
    started = time.perf_counter()
    rows = worker.execute(query, params).fetchall()
    took = time.perf_counter() - started
    if [row[0] for row in rows] != [sent]:
        raise RuntimeError(f"read {rows!r}, expected message {sent}")
    mq.archive(QUEUE, sent)
    return took


def case(pinned: bool, steps: int, step: int) -> list[tuple[int, float, float, int]]:
    from django_pgqueue import mq
    from django_pgqueue.bench.core import Bench
    from django_pgqueue.db import connect
    from django_pgqueue.mq import sql

    bench = Bench(only=["mq"], out=print)
    bench.create_database()
    rows = []
    try:
        mq.create(QUEUE)
        with bench.conn() as conn, connect("pinned-mq-read", prepare=True) as worker:
            conn.execute(f"VACUUM ANALYZE {TABLE}")
            pin = bench.conn()
            if pinned:
                pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                pin.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
            done = 0
            for k in range(steps + 1):
                full = statistics.median(timed_read(worker, None) for _ in range(10))
                floored = statistics.median(timed_read(worker, 2.0) for _ in range(10))
                (dead,) = conn.execute(
                    "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = %s", [TABLE]
                ).fetchone()
                rows.append((done, 1000 * full, 1000 * floored, int(dead)))
                print(f"  {'pinned' if pinned else 'clean'}: {rows[-1]}", flush=True)
                churn(conn, step * (k + 1), sql.MESSAGE_COLUMNS)
                conn.execute(f"VACUUM ANALYZE {TABLE}")  # as autovacuum would; the pin wins
                # The floored reads look at the last two seconds: a step's burst of
                # sends would be in them, where a steady stream leaves a few seconds'.
                time.sleep(SETTLE)
                done += step * (k + 1)
            if pinned:
                pin.execute("ROLLBACK")
            pin.close()
    finally:
        mq.store.forget(QUEUE)
        bench.drop_database()
    return rows


def main() -> None:
    results = run_both(__doc__ or "", case)
    print(
        "\n| archived since the start | pinned: full read, ms | pinned: floored read, ms "
        "| dead tuples | no pin: full read, ms | no pin: floored read, ms |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for (done, p_full, p_floored, dead), (_, c_full, c_floored, _) in zip(
        results[True], results[False], strict=True
    ):
        print(
            f"| {done:,} | {p_full:.2f} | {p_floored:.2f} | {dead:,} "
            f"| {c_full:.2f} | {c_floored:.2f} |"
        )


if __name__ == "__main__":
    main()
