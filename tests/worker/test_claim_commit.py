"""Claims commit asynchronously, completions synchronously (sql/fragments.py,
``ASYNC_COMMIT_SQL``): a claim PostgreSQL forgets in its own crash is claimed again, a
completion it forgot would run a finished task again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

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
