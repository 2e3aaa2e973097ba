"""The webhook deliveries' claim under a held-back xmin horizon: its time as finished
deliveries pile up since the pin, beside the same run without a pin
(docs/performance.md, "Webhook deliveries under a pinned horizon"). Measures;
asserts nothing.

    DATABASE_URL=postgresql://.../name python scripts/pinned_delivery_claim.py

Each case runs in a scratch database (``<name>_bench``, made and dropped here):
one endpoint with a backlog kept at about 2,000 pending deliveries (each of its own
event). In ``pinned``, one session idles in a ``REPEATABLE READ`` transaction, its
snapshot holding back the horizon in that database, from before the first claim.
Then, in steps, deliveries are finished (``succeeded``) and as many new ones added,
as a busy endpoint goes on: after each step, ten claims of up to 50 deliveries
(``webhooks.store.claim``, the worker's own call, on a connection opened as the
worker opens its own) are timed, each followed by the completion of what it took.
``--steps`` (default 7) and ``--step`` (deliveries finished in the first step,
default 10,000; step *k* finishes *k* times that).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from pinned_horizon import run_both

BACKLOG = 2000
CLAIM = {"limit": 50, "lease": 30.0, "worker_id": "pinned-delivery-claim"}
#: Columns a new pending delivery does not copy from the template row.
FRESH = {
    "event_id": "ev.id",
    "status": "'pending'",
    "locked_by": "NULL",
    "locked_until": "NULL",
    "attempts": "0",
    "finished_at": "NULL",
    "started_at": "NULL",
    "last_attempted_at": "NULL",
}


class Endpoint:
    """One endpoint's backlog, grown and finished by SQL around the worker's claims."""

    def __init__(self, conn: Any) -> None:
        from django_pgqueue.models import Endpoint as EndpointModel
        from django_pgqueue.webhooks.fanout import send_event

        EndpointModel.objects.create(url="https://example.com/pinned")
        send_event("pinned.claim", {"n": 1})
        self.conn = conn
        self.template, self.event = conn.execute(
            "SELECT id, event_id FROM pgqueue_delivery ORDER BY id LIMIT 1"
        ).fetchone()
        columns = [
            name
            for (name,) in conn.execute(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_name = 'pgqueue_delivery' AND column_name <> 'id'"
                " ORDER BY ordinal_position"
            )
        ]
        self.columns = ", ".join(columns)
        self.values = ", ".join(FRESH.get(c, f"d.{c}") for c in columns)

    def add(self, n: int) -> None:
        """``n`` new pending deliveries, each of a new event (one per event and endpoint)."""
        self.conn.execute(
            f"""WITH ev AS (
                INSERT INTO pgqueue_event (event_type, payload, body, msg_id, created_at, channels)
                SELECT e.event_type, e.payload, e.body, gen_random_uuid()::text, now(), e.channels
                FROM pgqueue_event AS e, generate_series(1, %s) WHERE e.id = %s RETURNING id
            )
            INSERT INTO pgqueue_delivery ({self.columns})
            SELECT {self.values} FROM ev, pgqueue_delivery AS d WHERE d.id = %s""",
            (n, self.event, self.template),
        )

    def finish(self, ids: list[int] | None = None, oldest: int = 0) -> None:
        """Finish these deliveries, or the ``oldest`` pending ones."""
        where = (
            "id = ANY(%s)"
            if ids is not None
            else (
                "id IN (SELECT id FROM pgqueue_delivery WHERE status = 'pending'"
                " ORDER BY id LIMIT %s)"
            )
        )
        self.conn.execute(
            "UPDATE pgqueue_delivery SET status = 'succeeded', locked_until = NULL,"
            f" finished_at = now() WHERE {where}",
            (ids if ids is not None else oldest,),
        )


def case(pinned: bool, steps: int, step: int) -> list[tuple[int, float, int]]:
    from django_pgqueue.bench.core import Bench
    from django_pgqueue.conf import get_settings
    from django_pgqueue.db import connect
    from django_pgqueue.webhooks import store

    bench = Bench(only=["webhooks"], out=print)
    bench.create_database()
    rows = []
    try:
        with bench.conn() as conn, connect("pinned-claim", prepare=True) as worker:
            endpoint = Endpoint(conn)
            endpoint.add(BACKLOG)
            conn.execute("VACUUM ANALYZE pgqueue_delivery")
            pin = bench.conn()
            if pinned:
                pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                pin.execute("SELECT count(*) FROM pgqueue_delivery").fetchone()
            finished = 0
            limit = get_settings().WEBHOOKS["MAX_IN_FLIGHT"]
            for k in range(steps + 1):
                times = []
                for _ in range(10):
                    started = time.perf_counter()
                    claimed = store.claim(worker, dict(CLAIM), limit)
                    times.append(time.perf_counter() - started)
                    endpoint.finish(ids=[row[0] for row in claimed])
                    endpoint.add(len(claimed))
                    finished += len(claimed)
                (dead,) = conn.execute(
                    "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'pgqueue_delivery'"
                ).fetchone()
                rows.append((finished, 1000 * statistics.median(times), int(dead)))
                print(f"  {'pinned' if pinned else 'clean'}: {rows[-1]}", flush=True)
                for _ in range(step * (k + 1) // BACKLOG):
                    endpoint.add(BACKLOG)
                    endpoint.finish(oldest=BACKLOG)
                finished += step * (k + 1) // BACKLOG * BACKLOG
            if pinned:
                pin.execute("ROLLBACK")
            pin.close()
    finally:
        bench.drop_database()
    return rows


def main() -> None:
    results = run_both(__doc__ or "", case)
    print(
        "\n| finished since the start | claim, pinned: median ms | dead tuples "
        "| claim, no pin: median ms | dead tuples |"
    )
    print("|---:|---:|---:|---:|---:|")
    for (done, pinned_ms, pinned_dead), (_, clean_ms, clean_dead) in zip(
        results[True], results[False], strict=True
    ):
        print(f"| {done:,} | {pinned_ms:.1f} | {pinned_dead:,} | {clean_ms:.1f} | {clean_dead:,} |")


if __name__ == "__main__":
    main()
