"""The HTTP API under crashes: commit-then-2xx and idempotent retries on a real server.

gunicorn (several gthread worker processes) serves the test project against a
database of the private cluster. Client threads send events, each with its own
``Idempotency-Key``, and retry the same key and body on any error, timeout or
connection reset until they get a 2xx, as the docs tell API clients to. Meanwhile
the test SIGKILLs worker processes, once the master with all its workers (then
starts the server again), and once crash-restarts PostgreSQL. Afterwards every
acknowledged event must exist, with the id it was acknowledged with and all its
deliveries, and no key may have produced two events.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass, field

import pytest

from django_pgqueue.bench.server import Server, gunicorn_unavailable

from ..conftest import REPO
from .conftest import _manage
from .helpers import query, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120)]

API = "/webhooks/api"
#: Every event fans out to this many endpoints (all subscribed to every type).
ENDPOINTS = 2
CLIENTS = 6
EVENTS = 240
#: gunicorn: worker processes x threads.
WORKERS = 3
THREADS = 2


@dataclass
class Ledger:
    """What the clients were told: key -> the 2xx body, plus how hard it was to get."""

    acked: dict[str, dict] = field(default_factory=dict)
    sent: int = 0
    retries: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def error(self, kind: str) -> None:
        with self.lock:
            self.retries += 1
            self.errors[kind] = self.errors.get(kind, 0) + 1


def _event(client: int, n: int) -> tuple[str, bytes]:
    key = f"crash-{client}-{n}"
    body = {"event_type": "order.paid", "payload": {"client": client, "n": n, "note": "naïve ☃"}}
    return key, json.dumps(body).encode()


def _send_until_acknowledged(
    port: int, api_key: str, key: str, body: bytes, ledger: Ledger, stop: threading.Event
) -> dict | None:
    """POST one event, retrying the same key and body until a 2xx (or ``stop``)."""
    headers = {
        "Authorization": f"Bearer {api_key}",
        "Content-Type": "application/json",
        "Idempotency-Key": key,
    }
    delay = 0.02
    while not stop.is_set():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            conn.request("POST", f"{API}/events", body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
            if 200 <= response.status < 300:
                return json.loads(data)
            ledger.error(f"http {response.status}")
        except (OSError, http.client.HTTPException) as exc:
            ledger.error(type(exc).__name__)
        finally:
            conn.close()
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
    return None


def _client(
    client: int, port: list[int], api_key: str, ledger: Ledger, stop: threading.Event
) -> None:
    for n in range(EVENTS // CLIENTS):
        key, body = _event(client, n)
        with ledger.lock:
            ledger.sent += 1
        answer = _send_until_acknowledged(port[0], api_key, key, body, ledger, stop)
        if answer is None:
            return
        with ledger.lock:
            ledger.acked[key] = answer


def _setup(url: str) -> str:
    """An API key with the send scope and ENDPOINTS endpoints taking every event."""
    create = "; ".join(
        f"Endpoint.objects.create(url='http://127.0.0.1:9/hook-{i}')" for i in range(ENDPOINTS)
    )
    _manage(url, "shell", "-c", f"from django_pgqueue.models import Endpoint; {create}")
    out = _manage(
        url,
        *("pgqueue_api_key", "create", "--name", "crash-test", "--scope", "send"),
        *("--rate-limit", "1000000"),  # the limiter runs, but never refuses here
    )
    return out.strip().splitlines()[-1].strip()


@pytest.mark.skipif(bool(gunicorn_unavailable()), reason=gunicorn_unavailable() or "-")
def test_kill9_server_and_database_restart_lose_no_acknowledged_event(
    cluster_db, fault_pg, summary
):
    api_key = _setup(cluster_db.url)
    server = Server(
        workers=WORKERS,
        threads=THREADS,
        cwd=REPO,
        # Persistent connections, as production runs them: after the database restart
        # each worker's first request finds its connection broken.
        env={
            "DATABASE_URL": cluster_db.url,
            "DJANGO_SETTINGS_MODULE": "testproject.settings",
            "DATABASE_CONN_MAX_AGE": "60",
        },
    )
    ledger = Ledger()
    stop = threading.Event()
    port = [server.port]
    kills = master_kills = 0
    try:
        server.start(f"{API}/openapi.json")
        server.wait_workers()
        clients = [
            threading.Thread(target=_client, args=(c, port, api_key, ledger, stop), daemon=True)
            for c in range(CLIENTS)
        ]
        for thread in clients:
            thread.start()

        def progress(fraction: float) -> bool:
            return len(ledger.acked) >= EVENTS * fraction

        # SIGKILL one worker at a time while requests are in flight; gunicorn's master
        # starts a fresh one. Then the whole server, then PostgreSQL.
        for step in (0.1, 0.2, 0.3):
            wait_until(lambda s=step: progress(s), 40, f"{step:.0%} acknowledged")
            kills += len(server.kill_workers(1))
        wait_until(lambda: progress(0.45), 40, "45% acknowledged")
        server.crash()
        master_kills += 1
        kills += 1
        time.sleep(0.3)  # clients see connection refused and keep retrying
        server.start(f"{API}/openapi.json")
        wait_until(lambda: progress(0.6), 40, "60% acknowledged")
        fault_pg.crash_restart()
        restarted = time.monotonic()
        wait_until(lambda: progress(0.7), 40, "70% acknowledged after the database restart")
        recover = time.monotonic() - restarted
        for step in (0.8, 0.9):
            wait_until(lambda s=step: progress(s), 40, f"{step:.0%} acknowledged")
            kills += len(server.kill_workers(2))
        for thread in clients:
            thread.join(40)
        assert not any(t.is_alive() for t in clients), "clients still retrying after 40 s"

        # A retry of an acknowledged request, now that nothing fails, gives the same answer.
        replayed = [_event(c, 0) for c in range(CLIENTS)]
        for key, body in replayed:
            again = _send_until_acknowledged(server.port, api_key, key, body, Ledger(), stop)
            assert again is not None and again["id"] == ledger.acked[key]["id"], (key, again)
    finally:
        stop.set()
        server.close()

    rows = query(
        cluster_db.dsn,
        "SELECT e.idempotency_key, e.id, count(d.id) FROM pgqueue_event e"
        " LEFT JOIN pgqueue_delivery d ON d.event_id = e.id GROUP BY e.id",
    )
    events = {key: (event_id, n) for key, event_id, n in rows}
    duplicates = len(rows) - len(events)
    assert len(ledger.acked) == ledger.sent == EVENTS, (len(ledger.acked), ledger.sent)
    lost = [key for key in ledger.acked if key not in events]
    wrong_id = [k for k, a in ledger.acked.items() if k in events and events[k][0] != a["id"]]
    short = [k for k, (_, n) in events.items() if n != ENDPOINTS]
    unasked = sorted(set(events) - set(ledger.acked))
    assert not lost, f"{len(lost)} acknowledged events lost: {lost[:10]}"
    assert not wrong_id, f"acknowledged ids differ from the stored events: {wrong_id[:10]}"
    assert not short, f"events without all {ENDPOINTS} deliveries: {short[:10]}"
    assert not unasked and duplicates == 0, (unasked[:10], duplicates)
    assert all(a["deliveries"] == ENDPOINTS for a in ledger.acked.values())
    # The faults did hit requests in flight (otherwise this test proves nothing).
    assert ledger.retries > 0, ledger.errors
    assert server.starts == 2
    errors = ", ".join(f"{k} {v}" for k, v in sorted(ledger.errors.items()))
    summary(
        faults=kills + 1,
        tasks=len(ledger.acked),
        duplicates=duplicates,
        lost=len(lost),
        recover=recover,
        note=(
            f"sent {ledger.sent} events, acknowledged {len(ledger.acked)}, retried "
            f"{ledger.retries} requests ({errors}); SIGKILLs: {kills - master_kills} worker "
            f"processes, {master_kills} master with its workers; 1 PostgreSQL crash-restart"
        ),
    )
