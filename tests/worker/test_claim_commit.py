"""Claims commit asynchronously, completions synchronously (sql/fragments.py,
``ASYNC_COMMIT_SQL``): a claim PostgreSQL forgets in its own crash is claimed again, a
completion it forgot would run a finished task again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from django_pgqueue import sql
from django_pgqueue.db import connect
from django_pgqueue.jobs import store
from django_pgqueue.outcomes import JobOutcome
from testproject.demo import tasks

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def conn() -> Iterator[psycopg.Connection]:
    with connect("commit-test") as conn:
        yield conn


def job_params(limit: int = 10) -> dict[str, Any]:
    return {"all_queues": True, "queues": [], "limit": limit, "lease": 60.0, "worker_id": "t"}


def commit_mode(conn: psycopg.Connection) -> str:
    return conn.execute("SHOW synchronous_commit").fetchone()[0]


def test_a_job_claim_commits_without_waiting_for_the_wal_and_its_completion_waits(
    conn: psycopg.Connection,
) -> None:
    tasks.noop.enqueue()
    with conn.transaction():
        assert commit_mode(conn) == "on"
        (job,) = store.claim(conn, job_params())
        assert job.status == "in_progress"
        assert commit_mode(conn) == "off"
    assert commit_mode(conn) == "on", "the setting is the claim's transaction's only"
    with conn.transaction():
        written = store.complete(conn, [JobOutcome(id=job.id, token=job.token, status="succeeded")])
        assert written == {job.id}
        assert commit_mode(conn) == "on"


def test_an_atomic_claim_commits_asynchronously_too(conn: psycopg.Connection) -> None:
    tasks.record_atomic.enqueue(label="claimed")
    with conn.transaction():
        (job,) = store.claim_atomic(conn, job_params())
        assert job.status == "in_progress"
        assert commit_mode(conn) == "off"


def _breaks_its_connection_first(original: Any, statement: str) -> Any:
    """``original`` (``store._above_floor``), run for ``statement`` after its
    connection's backend was terminated: the real error of a database connection lost
    between two statements of one claim. Other statements (the claims' upkeep, due
    or not depending on what ran before in this process) run as they are."""

    def run(conn: psycopg.Connection, params: dict[str, Any], which: str) -> Any:
        if which == statement:
            with connect("commit-test-killer") as killer:
                (pid,) = conn.execute("SELECT pg_backend_pid()").fetchone()
                killer.execute("SELECT pg_terminate_backend(%s)", [pid])
        return original(conn, params, which)

    return run


def test_jobs_a_claim_took_before_its_next_statement_failed_are_handed_over(
    conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flow claim takes a limited queue's jobs and commits; the plain claim after it
    fails (the connection is lost). The flow claim's jobs come back to the worker, to
    run now: not left leased until their leases lapse, and claimed again with an
    attempt more."""
    from django_pgqueue import queues

    queues.configure("limited", concurrency=5)
    limited = [int(tasks.noop.using(queue_name="limited").enqueue().id) for _ in range(3)]
    plain = int(tasks.noop.enqueue().id)
    store.forget_configured()
    monkeypatch.setattr(
        store, "_above_floor", _breaks_its_connection_first(store._above_floor, sql.CLAIM_JOBS)
    )
    taken = store.claim(conn, job_params())
    assert sorted(job.id for job in taken) == sorted(limited)
    with connect("commit-test-check") as check:
        rows = dict(
            check.execute(
                "SELECT id, status FROM pgqueue_job WHERE id = ANY(%s)", [[*limited, plain]]
            ).fetchall()
        )
    assert rows == {**dict.fromkeys(limited, "in_progress"), plain: "pending"}
    # With nothing taken first, the failure is the claim's.
    with connect("commit-test-2") as other, pytest.raises(psycopg.OperationalError):
        store.claim(other, job_params())
