"""Database-level faults on a private PostgreSQL 15 cluster: crash-restart under load,
lock and idle-in-transaction timeouts, a connection budget at its limit, and the same
queue through PgBouncer in transaction mode (catalogue F5, F6, F7, W5).

Workers and producers are subprocesses pointed at the cluster with DATABASE_URL;
the machine's shared PostgreSQL service is never restarted.
"""

from __future__ import annotations

import re
import signal
import threading
import time

import psycopg
import pytest
from psycopg import sql as pgsql

from .conftest import worker_env
from .helpers import (
    backends,
    count_text,
    enqueue_sql,
    job,
    ledger,
    query,
    wait_terminal,
    wait_text,
    wait_until,
)

pytestmark = [pytest.mark.fault, pytest.mark.timeout(90), pytest.mark.django_db(transaction=True)]


class Acks:
    """Reads a producer's stdout: ids acknowledged to the caller (``ACK <id>``)."""

    def __init__(self, proc) -> None:
        self.proc = proc
        self.ids: list[int] = []
        self.errors = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("ACK "):
                self.ids.append(int(line.split()[1]))
            elif line.startswith("ERR"):
                self.errors += 1
            elif line.startswith("DONE"):
                self.done.set()


def _stop(*procs) -> None:
    for proc in procs:
        proc.signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(30) == 0, proc.output()


def test_crash_restart_under_load_keeps_every_acknowledged_job(
    worker_process, cluster_db, producer, fault_pg, summary
):
    """F5: pg_ctl -m immediate restart halfway through 1,000 one-transaction enqueues."""
    env = worker_env(DATABASE_URL=cluster_db.url, PGQUEUE_LOG_LEVEL="ERROR")
    workers = [worker_process("--concurrency", "4", env=env) for _ in range(2)]
    pids = [w.pid for w in workers]
    acks = Acks(producer(cluster_db.url, 1000))
    wait_until(lambda: len(acks.ids) >= 500, 60, "500 acknowledged enqueues")
    fault_pg.crash_restart()
    crashed = time.monotonic()
    assert acks.done.wait(60), "producer did not finish"
    book = wait_terminal(cluster_db.dsn, None, timeout=45)
    recover = time.monotonic() - crashed
    present = {r[0] for r in query(cluster_db.dsn, "SELECT id FROM pgqueue_job")}
    missing = set(acks.ids) - present
    assert not missing, f"{len(missing)} acknowledged jobs lost in the crash"
    acked = ledger(cluster_db.dsn, acks.ids)
    assert not acked.lost and acked.terminal
    assert acked.states.get("succeeded", 0) == len(acks.ids), acked.states
    # Workers reconnected on their own: same processes, still running.
    assert [w.pid for w in workers] == pids and all(w.proc.poll() is None for w in workers)
    _stop(*workers)
    summary(
        faults=1,
        tasks=book.tasks,
        duplicates=book.duplicates,
        lost=len(missing),
        recover=recover,
        note=f"crash-restart at 500/1000 acks; {acks.errors} enqueue retries",
    )


def test_queue_tables_are_logged_and_enqueue_keeps_synchronous_commit(cluster_db):
    """F5 static: an UNLOGGED table or synchronous_commit=off would lose jobs in a crash."""
    rows = query(
        cluster_db.dsn,
        "SELECT relname, relpersistence FROM pg_class"
        " WHERE relname LIKE 'pgqueue%%' AND relkind IN ('r', 'p')",
    )
    assert rows and all(p == "p" for _, p in rows), rows
    from pathlib import Path

    import django_pgqueue

    package = Path(django_pgqueue.__file__).parent
    for path in package.rglob("*.py"):
        if (
            "mq" in path.relative_to(package).parts
            or path.stem in ("mq", "message_queues")
            or (path.stem.endswith("_message_queues"))
        ):
            # Message queues offer UNLOGGED as an explicit per-queue opt-in
            # (docs/message-queues.md); jobs and deliveries never use it.
            continue
        text = path.read_text().lower()
        if path.relative_to(package).parts == ("sql", "fragments.py"):
            # ASYNC_COMMIT_SQL, declared once: a transaction-local set_config for the claims
            # (whose loss in a crash only makes a row due again) and the HTTP API's
            # rate-limit counter, each in its own autocommit statement, never in a
            # transaction that stores work (tests/worker/test_claim_commit.py,
            # tests/api/test_events.py check the setting after them).
            text = text.replace("set_config('synchronous_commit', 'off', true)", "", 1)
        if path.parent.name == "migrations":
            # The message-queue registry's own column (models/message_queues.py, the
            # per-queue opt-in), declared again by the migration that creates it.
            text = re.sub(r'"unlogged",|"unlogged message table[^"]*"', "", text)
        assert "synchronous_commit" not in text, path
        assert "unlogged" not in text, path
        if "async_commit" in text and path.name != "fragments.py":
            # Its only users: the claims' frame and the API's authentication.
            assert path.relative_to(package).parts in (("sql", "api.py"),), path


def test_lock_timeout_on_claims_backs_off_and_recovers(worker_process, cluster_db, summary):
    """F6a: a migration-style ACCESS EXCLUSIVE lock; claims time out, the worker stays up."""
    ids = enqueue_sql(cluster_db.dsn, 20)
    before = ledger(cluster_db.dsn, ids)
    locker = psycopg.connect(cluster_db.dsn, connect_timeout=5)
    locker.execute("LOCK TABLE pgqueue_job IN ACCESS EXCLUSIVE MODE")
    w = worker_process(
        "--concurrency",
        "2",
        env=worker_env(DATABASE_URL=cluster_db.url, PGOPTIONS="-c lock_timeout=500"),
    )
    try:
        wait_text(w, "lock timeout", timeout=20)
        wait_until(lambda: count_text(w, "lock timeout") >= 2, 10, "a second timed-out claim")
    finally:
        locker.rollback()  # release: held for about 3 lock timeouts
        locker.close()
    released = time.monotonic()
    assert before.runs == 0
    book = wait_terminal(cluster_db.dsn, ids, timeout=20)
    recover = time.monotonic() - released
    assert book.states == {"succeeded": 20} and book.runs == 20
    assert w.proc.poll() is None
    _stop(w)
    summary(
        faults=1,
        tasks=20,
        duplicates=0,
        lost=0,
        recover=recover,
        note="ACCESS EXCLUSIVE lock with lock_timeout=500ms",
    )


def test_no_transaction_spans_task_code(worker_process, cluster_db, summary):
    """F6b: idle_in_transaction_session_timeout=1s never fires while a task runs 2.5 s."""
    ids = enqueue_sql(cluster_db.dsn, 2, kwargs={"sleep": 2.5})
    w = worker_process(
        "--concurrency",
        "2",
        env=worker_env(
            DATABASE_URL=cluster_db.url,
            PGOPTIONS="-c idle_in_transaction_session_timeout=1000",
        ),
    )
    book = wait_terminal(cluster_db.dsn, ids, timeout=20)
    assert book.states == {"succeeded": 2} and book.runs == 2
    for job_id in ids:
        assert job(cluster_db.dsn, job_id)["attempts"] == 1
    for text in ("terminat", "failed", "lost"):
        assert count_text(w, text) == 0, w.output()
    _stop(w)
    summary(
        faults=1,
        tasks=2,
        duplicates=0,
        lost=0,
        note="idle_in_transaction_session_timeout=1s, tasks of 2.5s",
    )


def test_connection_budget_at_its_limit_keeps_leases_alive(worker_process, cluster_db, summary):
    """F7a: a role limited to exactly the documented budget (1 claim + 1 completion/lease +
    1 LISTEN + 1 maintenance + one per task thread); tasks take half a lease, and none of
    their leases lapses."""
    role = f"budget_{cluster_db.name}"
    with psycopg.connect(cluster_db.dsn, autocommit=True) as conn:
        conn.execute(
            pgsql.SQL("CREATE ROLE {} LOGIN CONNECTION LIMIT 8").format(pgsql.Identifier(role))
        )
        for kind in ("TABLES", "SEQUENCES"):
            conn.execute(
                pgsql.SQL("GRANT ALL ON ALL {} IN SCHEMA public TO {}").format(
                    pgsql.SQL(kind), pgsql.Identifier(role)
                )
            )
    ids = enqueue_sql(cluster_db.dsn, 16, kwargs={"sleep": 1.0})
    url = cluster_db.url.replace("postgres@", f"{role}@")
    w = worker_process("--concurrency", "4", env=worker_env(DATABASE_URL=url))
    started = time.monotonic()
    wait_until(lambda: backends(cluster_db.dsn, "pgqueue-%") >= 3, 15, "worker sessions")
    book = wait_terminal(cluster_db.dsn, ids, timeout=40)
    assert book.states == {"succeeded": 16} and book.runs == 16 and book.duplicates == 0
    for job_id in ids:
        row = job(cluster_db.dsn, job_id)
        assert (row["attempts"], row["errors"]) == (1, []), row  # no lease ever lapsed
    assert count_text(w, "too many connections") == 0, w.output()
    _stop(w)
    with psycopg.connect(cluster_db.dsn, autocommit=True) as conn:
        conn.execute(pgsql.SQL("DROP OWNED BY {}").format(pgsql.Identifier(role)))
        conn.execute(pgsql.SQL("DROP ROLE {}").format(pgsql.Identifier(role)))
    summary(
        faults=0,
        tasks=16,
        duplicates=0,
        lost=0,
        recover=time.monotonic() - started,
        note="role CONNECTION LIMIT 8 = 4 + 4 task threads",
    )


def test_through_pgbouncer_transaction_pooling(
    worker_process, cluster_db, producer, pgbouncer_proxy, summary
):
    """W5: enqueue, claim and complete through PgBouncer (transaction mode, no prepared
    statements); LISTEN over a direct DSN; NOTIFY from the producer through the bouncer."""
    bouncer = pgbouncer_proxy(cluster_db.name)
    url = bouncer.url(cluster_db.name)
    env = worker_env(
        DATABASE_URL=url,
        DATABASE_DISABLE_SERVER_SIDE_CURSORS="1",
        PGQUEUE_PREPARED_STATEMENTS="0",
        PGQUEUE_LISTEN_DSN=cluster_db.dsn,
        PGQUEUE_POLL_INTERVAL="30",  # fast pickup below proves NOTIFY -> direct LISTEN
        PGQUEUE_LOG_LEVEL="WARNING",
    )
    w = worker_process("--concurrency", "4", "--worker-id", "w5", env=env)
    wait_until(lambda: backends(cluster_db.dsn, "pgqueue-listen-w5"), 15, "direct LISTEN")
    started = time.monotonic()
    acks = Acks(
        producer(
            url, 300, DATABASE_DISABLE_SERVER_SIDE_CURSORS="1", PGQUEUE_PREPARED_STATEMENTS="0"
        )
    )
    assert acks.done.wait(60)
    # A process that exits right after enqueueing may take its last coalesced NOTIFY
    # with it (NOTIFY is only a wake-up); one more enqueue through the bouncer, with
    # its NOTIFY in the same transaction, wakes the worker for everything still due.
    (last,) = enqueue_sql(bouncer.dsn(cluster_db.name), 1)
    book = wait_terminal(cluster_db.dsn, [*acks.ids, last], timeout=10)
    elapsed = time.monotonic() - started
    assert book.states == {"succeeded": 301} and book.runs == 301 and book.duplicates == 0
    row = job(cluster_db.dsn, last)
    assert (row["started_at"] - row["created_at"]).total_seconds() < 2  # not the 30 s poll
    assert count_text(w, "prepared statement") == 0, w.output()
    _stop(w)
    summary(
        faults=0,
        tasks=301,
        duplicates=0,
        lost=0,
        recover=elapsed,
        note="PgBouncer transaction mode, LISTEN direct",
    )
