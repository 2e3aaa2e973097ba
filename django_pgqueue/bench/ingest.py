"""The ingest rows of ``pgqueue_bench``: ``POST /events`` of the HTTP API on a real
server, next to a bare Django view on the same server (the ceiling).

The bench starts gunicorn (``--ingest-workers`` processes of 4 threads, persistent
database connections) serving ``bench/wsgi.py`` on the scratch database. Client
threads of this process, each on its own keep-alive connection, post events, each
with its own ``Idempotency-Key``, as fast as answers come back: ``n_ingest`` per
run, for each number of clients in ``--ingest-clients``. The ceiling
(``bench/views.py``) parses the same body and runs the same event INSERT with the
same key, in its own transaction, without authentication, validation, rate limit
or stored response. No endpoint exists, so neither side writes a delivery.

Per client count: throughput (target ≥ 0.8x the ceiling) and the p50 and p99
latencies of a request as the client sees it.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import threading
import time
import uuid
from typing import Any

from .server import Server, api_server_unavailable

#: The running benchmark (``core.Bench``), which imports this module to run it:
#: typed loosely here so that neither module imports the other.
Bench = Any

API_EVENTS = "/api/events"
CEILING_EVENTS = "/ceiling/events"
#: A small order event, the kind of payload an application sends.
PAYLOAD = {"order_id": 1042, "amount_cents": 2599, "currency": "EUR", "items": [1, 2, 3]}
WARM_UP = 20
THREADS = 4


def bench_ingest(bench: Bench) -> None:
    from .rows import Row, pctl

    reason = api_server_unavailable()
    if reason:
        bench.notes.append(f"ingest: skipped ({reason})")
        bench.out(f"   skipped: {reason}")
        return
    api_key = create_api_key(bench)
    server = Server(
        "django_pgqueue.bench.wsgi:application",
        workers=bench.ingest_workers,
        threads=THREADS,
        env=bench.child_env(PGQUEUE_BENCH_ALIAS=bench.alias, PGQUEUE_BENCH_DATABASE=bench.db_name),
    )
    setup = f"gunicorn {bench.ingest_workers} workers x {THREADS} threads"
    rows: dict[int, dict[str, Row]] = {}
    for clients in bench.ingest_clients:
        label = f"{clients} keep-alive clients, {setup}"
        rows[clients] = {
            "rate": bench.add(
                Row(
                    "ingest",
                    f"POST /events, {label}",
                    "events/s",
                    reference="bare Django view, same INSERT",
                    target="≥ 80% of ceiling",
                    goal=0.8,
                    extra={"n": bench.n_ingest, "clients": clients},
                )
            ),
            **{
                q: bench.add(
                    Row(
                        "ingest",
                        f"{q} latency, {label}",
                        "ms",
                        reference="bare Django view, same INSERT",
                        better="lower",
                        extra={"n": bench.n_ingest, "clients": clients},
                    )
                )
                for q in ("p50", "p99")
            },
        }
    try:
        server.start("/ceiling/events")
        server.wait_workers()
        for rep in range(bench.repeat):
            for clients in bench.ingest_clients:
                # Alternate the order so drift on a shared machine favours neither.
                order = ("ceiling", "ours") if rep % 2 == 0 else ("ours", "ceiling")
                for side in order:
                    truncate_events(bench)
                    path = API_EVENTS if side == "ours" else CEILING_EVENTS
                    rate, latencies = post_events(server.port, path, api_key, clients, bench)
                    row = rows[clients]
                    for name, value in (
                        ("rate", rate),
                        ("p50", pctl(latencies, 50)),
                        ("p99", pctl(latencies, 99)),
                    ):
                        (row[name].values if side == "ours" else row[name].ref_values).append(value)
                row = rows[clients]
                bench.out(
                    f"   rep {rep + 1}, {clients} clients: ours {row['rate'].values[-1]:,.0f}/s "
                    f"(p50 {row['p50'].values[-1]:.1f} ms, p99 {row['p99'].values[-1]:.1f} ms), "
                    f"ceiling {row['rate'].ref_values[-1]:,.0f}/s "
                    f"(p50 {row['p50'].ref_values[-1]:.1f} ms, "
                    f"p99 {row['p99'].ref_values[-1]:.1f} ms)"
                )
    finally:
        server.close()
    truncate_events(bench)


def create_api_key(bench: Bench) -> str:
    """A key with the send scope, made by the management command in the scratch database."""
    proc = subprocess.run(
        [
            *bench._manage(),
            *("pgqueue_api_key", "create", "--name", "bench", "--scope", "send"),
            # The key's rate limit is checked on every request (one statement with the
            # authentication), but set so high that it never refuses one here.
            *("--rate-limit", "1000000000"),
        ],
        env=bench.child_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"pgqueue_api_key create failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout.strip().splitlines()[-1].strip()


def truncate_events(bench: Bench) -> None:
    from .. import sql

    bench.sql(f"TRUNCATE {sql.EVENT_TABLE} CASCADE")
    bench.checkpoint()


def post_events(
    port: int, path: str, api_key: str, clients: int, bench: Bench
) -> tuple[float, list[float]]:
    """``bench.n_ingest`` events from ``clients`` threads; (events/s, sorted latencies ms)."""
    run = uuid.uuid4().hex[:8]
    per_client = max(1, bench.n_ingest // clients)
    barrier = threading.Barrier(clients + 1)
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[BaseException] = []
    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    body = json.dumps({"event_type": "order.paid", "payload": PAYLOAD}).encode()

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            # Warm-up: the connection, the worker's database connection, its caches.
            for n in range(WARM_UP):
                send(conn, f"{run}-w{i}-{n}")
            barrier.wait()
            mine = latencies[i]
            for n in range(per_client):
                t0 = time.perf_counter()
                send(conn, f"{run}-{i}-{n}")
                mine.append((time.perf_counter() - t0) * 1000)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()
        finally:
            conn.close()

    def send(conn: http.client.HTTPConnection, key: str) -> None:
        conn.request("POST", path, body=body, headers={**headers, "Idempotency-Key": key})
        response = conn.getresponse()
        data = response.read()
        if response.status != 202:
            raise RuntimeError(f"POST {path}: {response.status} {data[:500]!r}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        pass
    t0 = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"ingest: {errors[0]}") from errors[0]
    done = per_client * clients
    return done / elapsed, sorted(v for mine in latencies for v in mine)
