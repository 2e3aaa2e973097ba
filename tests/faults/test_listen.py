"""Wake-ups: poll-only correctness, LISTEN after its backend is terminated, a half-open
LISTEN socket, and NOTIFY's transactional semantics (catalogue W1-W4).

NOTIFY is an optimisation: every test here also shows the poll (or the sweep after a
reconnect) picking up what a lost notification would have announced.
"""

from __future__ import annotations

import signal
import time

import psycopg
import pytest
from django.db import connection, transaction

from .conftest import worker_env
from .helpers import (
    backends,
    enqueue_sql,
    job,
    ledger,
    line_index,
    query,
    terminate,
    wait_terminal,
    wait_text,
    wait_until,
)

pytestmark = [pytest.mark.fault, pytest.mark.timeout(60), pytest.mark.django_db(transaction=True)]


def _pickup_seconds(dsn: str, job_id: int) -> float:
    """Seconds from commit of the enqueue to the claim, both on the database clock."""
    row = job(dsn, job_id)
    return (row["started_at"] - row["created_at"]).total_seconds()


def _enqueue(label: str = "") -> int:
    from testproject.demo import tasks

    return int(tasks.record_run.enqueue(label).id)


def test_poll_only_mode_picks_up_within_the_poll_interval(worker_process, test_dsn, summary):
    """W1: no LISTEN at all; pickup is bounded by the poll interval, and a batch runs once."""
    w = worker_process(
        "--no-notify",
        "--concurrency",
        "4",
        env=worker_env(PGQUEUE_POLL_INTERVAL="1", PGQUEUE_LOG_LEVEL="WARNING"),
    )
    wait_until(lambda: backends(test_dsn, "pgqueue-worker-%"), 15, "worker connected")
    assert backends(test_dsn, "pgqueue-listen-%") == 0
    latencies = []
    for i in range(4):
        job_id = _enqueue(f"w1-{i}")
        wait_terminal(test_dsn, [job_id], timeout=5)
        latencies.append(_pickup_seconds(test_dsn, job_id))
    assert max(latencies) <= 1.0 + 0.5, latencies
    from django_pgqueue import enqueue_many
    from testproject.demo import tasks

    ids = [int(r.id) for r in enqueue_many(tasks.record_run, [(("w1",), {})] * 300)]
    book = wait_terminal(test_dsn, ids, timeout=30)
    assert book.states == {"succeeded": 300} and book.runs == 300 and book.duplicates == 0
    w.signal(signal.SIGTERM)
    assert w.wait(15) == 0
    summary(
        faults=0,
        tasks=304,
        duplicates=0,
        lost=0,
        note=f"poll-only; pickup max {max(latencies):.2f}s at poll 1s",
    )


def test_listen_recovers_after_backend_terminated_with_a_sweep(worker_process, test_dsn, summary):
    """W2: the poll is 60 s, so only NOTIFY or the reconnect sweep can be fast."""
    w = worker_process(
        "--worker-id",
        "w2",
        env=worker_env(PGQUEUE_POLL_INTERVAL="60", PGQUEUE_TEST_PAUSE_AT="listener_reconnecting"),
    )
    wait_until(lambda: backends(test_dsn, "pgqueue-listen-w2"), 15, "LISTEN session")
    wait_text(w, "Worker w2 starting")
    j0 = _enqueue("w2-before")
    wait_terminal(test_dsn, [j0], timeout=3)  # NOTIFY works before the fault
    assert terminate(test_dsn, "pgqueue-listen-w2") == 1
    faulted = time.monotonic()
    w.wait_line("PAUSED listener_reconnecting")
    j1 = _enqueue("w2-during")  # its NOTIFY reaches nobody
    assert job(test_dsn, j1)["status"] == "pending"
    start = line_index(w)
    w.resume()
    wait_text(w, "LISTEN connection restored", timeout=5, start=start)
    back = time.monotonic()
    wait_terminal(test_dsn, [j1], timeout=2)  # the sweep after reconnecting
    sweep = time.monotonic() - back
    j2 = _enqueue("w2-after")
    wait_terminal(test_dsn, [j2], timeout=2)  # LISTEN was issued again
    recover = time.monotonic() - faulted
    assert _pickup_seconds(test_dsn, j2) < 2
    book = ledger(test_dsn, [j0, j1, j2])
    assert book.runs == 3
    w.signal(signal.SIGTERM)
    assert w.wait(15) == 0
    summary(
        faults=1,
        tasks=3,
        duplicates=0,
        lost=0,
        recover=recover,
        note=f"listener terminated; sweep picked the missed job in {sweep:.2f}s",
    )


def test_half_open_listen_socket_is_detected_and_replaced(
    worker_process, cluster_db, fault_proxy, summary
):
    """W3: the LISTEN connection goes through a proxy that turns into a black hole."""
    dsn = cluster_db.dsn
    w = worker_process(
        "--worker-id",
        "w3",
        env=worker_env(
            DATABASE_URL=cluster_db.url,
            PGQUEUE_POLL_INTERVAL="3",
            PGQUEUE_LISTEN_DSN=fault_proxy.dsn_for(cluster_db.dsn),
            PGQUEUE_LISTEN_HEALTH_INTERVAL="1",
        ),
    )
    wait_until(lambda: backends(dsn, "pgqueue-listen-w3"), 15, "LISTEN session")
    wait_text(w, "Worker w3 starting")
    (j0,) = enqueue_sql(dsn, 1)  # sends NOTIFY on commit
    wait_terminal(dsn, [j0], timeout=3)
    start = line_index(w)
    fault_proxy.blackhole()
    faulted = time.monotonic()
    (j1,) = enqueue_sql(dsn, 1)  # only the poll can find it now
    wait_text(w, "LISTEN connection lost", timeout=1 + 2 + 2, start=start)
    detected = time.monotonic() - faulted
    wait_terminal(dsn, [j1], timeout=3 + 1)
    fault_proxy.unblackhole()
    wait_text(w, "LISTEN connection restored", timeout=15, start=start)
    recover = time.monotonic() - faulted
    (j2,) = enqueue_sql(dsn, 1)
    wait_terminal(dsn, [j2], timeout=3)
    assert _pickup_seconds(dsn, j2) < 1.0
    assert ledger(dsn, [j0, j1, j2]).runs == 3
    w.signal(signal.SIGTERM)
    assert w.wait(15) == 0
    summary(
        faults=1,
        tasks=3,
        duplicates=0,
        lost=0,
        recover=recover,
        note=f"half-open LISTEN detected in {detected:.2f}s (health 1s + 2s deadline)",
    )


def _listen(dsn: str) -> psycopg.Connection:
    conn = psycopg.connect(dsn, autocommit=True, connect_timeout=5)
    conn.execute("LISTEN pgqueue")
    return conn


def _notifications_until_sentinel(conn: psycopg.Connection, dsn: str) -> list[str]:
    query(dsn, "SELECT pg_notify('pgqueue', 'sentinel')")
    seen = []
    for note in conn.notifies(timeout=5):
        if note.payload == "sentinel":
            return seen
        seen.append(note.payload)
    raise AssertionError("sentinel notification never arrived")


def test_rolled_back_enqueue_leaves_no_row_and_no_notify(test_dsn):
    """W4a: enqueue joins the caller's transaction; a rollback takes the job and its wake-up."""
    from django_pgqueue.models import Job
    from testproject.demo import tasks

    listener = _listen(test_dsn)
    try:
        with pytest.raises(RuntimeError), transaction.atomic():
            tasks.add.enqueue(1, 2)
            raise RuntimeError("the request failed")
        assert Job.objects.count() == 0
        from django_pgqueue.notify import notifier

        sent = notifier.sent
        assert _notifications_until_sentinel(listener, test_dsn) == []
        assert notifier.sent == sent
    finally:
        listener.close()


def test_job_is_claimable_only_after_commit(run_worker, test_dsn):
    """W4b: an open transaction's job is invisible; after commit it is claimed quickly."""
    from testproject.demo import tasks

    worker = run_worker(burst=False, poll_interval=0.2)
    wait_until(lambda: worker.listener.connected.is_set(), 10, "listener")
    with transaction.atomic():
        job_id = int(tasks.record_run.enqueue("w4b").id)
        with connection.cursor() as cur:
            cur.execute("SELECT pg_sleep(0.6), clock_timestamp()")  # several polls pass
            before_commit = cur.fetchone()[1]
    committed = time.monotonic()
    wait_terminal(test_dsn, [job_id], timeout=5)
    assert time.monotonic() - committed < 1.0
    assert job(test_dsn, job_id)["started_at"] >= before_commit


def test_one_wakeup_is_enough_for_a_transaction_of_many_jobs(run_worker, test_dsn):
    """W4c: 100 enqueues in one transaction; the poll is 60 s, so one NOTIFY drives it all."""
    from testproject.demo import tasks

    worker = run_worker(burst=False, poll_interval=60)
    wait_until(lambda: worker.listener.connected.is_set(), 10, "listener")
    before = worker.listener.notifications
    with transaction.atomic():
        ids = [int(tasks.record_run.enqueue(f"w4c-{i}").id) for i in range(100)]
    book = wait_terminal(test_dsn, ids, timeout=10)
    assert book.states == {"succeeded": 100} and book.runs == 100
    assert 1 <= worker.listener.notifications - before <= 2
