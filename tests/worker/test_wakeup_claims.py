"""What an idle worker does when a NOTIFY wakes it: one claim, and nothing else first.

The claim a NOTIFY wakes decides the wake-up latency. It used to be followed at
once by a second claim (which found nothing, at a claim's cost per wake-up, while
the job's task thread waited for the GIL), and about one in ten also ran the
claims' once-a-second upkeep first (ending lapsed workflow steps, asking about
flow-controlled queues): two more statements before the job could start.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql as pgsql

from django_pgqueue.conf import get_settings
from django_pgqueue.db import connection_params
from django_pgqueue.jobs import store
from django_pgqueue.models import Job
from django_pgqueue.worker.runner import TaskRunner
from django_pgqueue.worker.sources import JobSource
from testproject.demo import tasks

from ..conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

WAKE_UPS = 6


class CountingJobSource(JobSource):
    def __init__(self, worker_id: str) -> None:
        super().__init__(TaskRunner(worker_id, get_settings().UNKNOWN_TASK_DELAY))
        self.claims: list[int] = []

    def claim(self, conn: Any, params: dict[str, Any]) -> list[Any]:
        rows = super().claim(conn, params)
        self.claims.append(len(rows))
        return rows


def idle_worker(run_worker: Any, source: CountingJobSource) -> Any:
    """A worker of ``source`` alone, listening, past its first (empty) claim, that
    polls only once a minute: every later claim follows a NOTIFY."""
    worker = run_worker(
        burst=False, sources=[source], poll_interval=60.0, concurrency=1, notify=True
    )
    assert worker.listener is not None
    wait_for(worker.listener.connected.is_set, 10, "the LISTEN connection")
    wait_for(lambda: len(source.claims) >= 1, 10, "the first claim")
    return worker


def test_a_woken_worker_claims_once_and_the_upkeep_is_done_while_idle(
    run_worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    upkeeps: list[str] = []
    end_lapsed_steps = store.end_lapsed_steps

    def recorded(conn: Any, params: dict[str, Any]) -> list[Any]:
        # upkeep() called it; who called upkeep: a claim, or the idle worker?
        upkeeps.append(sys._getframe(2).f_code.co_name)
        return end_lapsed_steps(conn, params)

    monkeypatch.setattr(store, "end_lapsed_steps", recorded)
    source = CountingJobSource("wakeup-test")
    idle_worker(run_worker, source)
    time.sleep(0.3)
    before = len(source.claims)
    upkeeps.clear()

    for n in range(WAKE_UPS):
        result = tasks.add.enqueue(n, 1)
        wait_for(
            lambda r=result: Job.objects.filter(pk=int(r.id), status="succeeded").exists(),
            10,
            f"job {n}",
        )
        time.sleep(0.35)  # the wake-ups spread over two seconds of upkeep

    claims = source.claims[before:]
    assert claims == [1] * WAKE_UPS, f"one claim per wake-up, each taking its job: {claims}"
    assert upkeeps, "the upkeep ran while the worker was idle"
    assert set(upkeeps) == {"upkeep"}, f"a woken claim ran the upkeep first: {upkeeps}"


def test_an_idle_upkeep_that_loses_its_connection_warns_once_and_the_next_claim_reconnects(
    run_worker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    source = CountingJobSource("upkeep-lost")
    worker = idle_worker(run_worker, source)
    params = connection_params()
    database = params["dbname"]
    # A database cannot refuse sessions from a session of its own: from another one.
    admin = psycopg.connect(**{**params, "dbname": "postgres"}, autocommit=True)
    allow = "ALTER DATABASE {} ALLOW_CONNECTIONS {}"
    try:
        # The database refuses new sessions (superusers too) and loses the claim's.
        admin.execute(pgsql.SQL(allow.format("{}", "false")).format(pgsql.Identifier(database)))
        (killed,) = admin.execute(
            "SELECT pg_catalog.count(pg_catalog.pg_terminate_backend(pid))"
            " FROM pg_catalog.pg_stat_activity WHERE application_name = %s",
            (f"pgqueue-worker-{worker.worker_id}",),
        ).fetchone()
        assert killed == 1
        with caplog.at_level(logging.WARNING, logger="django_pgqueue.worker"):
            time.sleep(2.5)  # several upkeeps fall due meanwhile, ten ticks
    finally:
        admin.execute(pgsql.SQL(allow.format("{}", "true")).format(pgsql.Identifier(database)))
        admin.close()
    failures = [r for r in caplog.records if "Claim upkeep failed" in r.getMessage()]
    assert len(failures) == 1, [r.getMessage() for r in caplog.records]
    before = len(source.claims)
    result = tasks.add.enqueue(2, 3)
    wait_for(
        lambda: Job.objects.filter(pk=int(result.id), status="succeeded").exists(),
        10,
        "the job enqueued after the connection was lost",
    )
    assert source.claims[before:][0] == 1
