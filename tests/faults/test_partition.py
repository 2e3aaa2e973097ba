"""N1: a worker host cut off from the database in the middle of its tasks.

The partitioned worker runs in its own network namespace, reaching a private
PostgreSQL cluster through a veth pair (tests/support/netns.py); a second worker runs in
the host namespace on 127.0.0.1. The link is taken down while the partitioned
worker's tasks run: its leases lapse, the host worker finishes the work, and once
the link is back the partitioned worker's late completions are fenced by the
claim token and it goes on claiming new work without a restart.

Needs root and ``ip`` (iproute2); skipped loudly where a namespace cannot be made.
"""

from __future__ import annotations

import signal
import sys
import time
import warnings
from collections.abc import Iterator

import pytest

from ..support.netns import NetNs
from ..support.pgcluster import PgCluster
from .conftest import _manage, worker_env
from .helpers import enqueue_sql, ledger, query, wait_terminal, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.timeout(240), pytest.mark.django_db(transaction=True)]

MARK_THEN_SLEEP = "testproject.demo.tasks.mark_then_sleep"

#: How long each task of the partitioned worker runs: the link goes down halfway.
TASK_SECONDS = 4.0


@pytest.fixture
def net() -> Iterator[NetNs]:
    reason = NetNs.unavailable()
    if reason is not None:
        message = f"network partition test SKIPPED: {reason}"
        print(f"\nWARNING: {message}", file=sys.stderr)
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn(message, stacklevel=1)
        pytest.skip(f"cannot create a network namespace here: {reason}")
    with NetNs() as namespace:
        yield namespace


@pytest.fixture
def net_pg(net: NetNs) -> Iterator[PgCluster]:
    """A private cluster listening on 127.0.0.1 and on the host end of the veth pair."""
    cluster = PgCluster(
        settings={"listen_addresses": f"127.0.0.1,{net.host_addr}", "max_connections": 40},
        hba=[f"host all all {net.cidr} trust"],
    )
    try:
        cluster.start()
        cluster.create_database("q")
        _manage(cluster.url("q"), "migrate", "--no-input", "-v", "0")
        yield cluster
    finally:
        cluster.cleanup()


def _held_by(dsn: str, worker_id: str) -> list[int]:
    rows = query(
        dsn,
        "SELECT id FROM pgqueue_job WHERE status = 'in_progress' AND worker_id = %s",
        (worker_id,),
    )
    return [r[0] for r in rows]


def test_partitioned_worker_loses_its_leases_is_fenced_and_rejoins(
    worker_process, net, net_pg, summary
):
    dsn = net_pg.dsn("q")
    far = worker_process(
        "--concurrency",
        "2",
        "--prefetch",
        "0",
        "--worker-id",
        "far",
        env=worker_env(
            DATABASE_URL=f"postgresql://postgres@{net.host_addr}:{net_pg.port}/q",
            PGQUEUE_LOG_LEVEL="INFO",
        ),
        prefix=net.prefix(),
    )
    # mark_then_sleep writes its run row when it starts (the link is up), then only sleeps.
    cut_jobs = enqueue_sql(
        dsn, 2, task_path=MARK_THEN_SLEEP, kwargs={"label": "cut", "seconds": TASK_SECONDS}
    )
    wait_until(lambda: len(_held_by(dsn, "far")) == 2, 60, "the far worker to claim both")
    started = time.monotonic()
    time.sleep(TASK_SECONDS / 2)  # in the middle of both tasks
    net.cut()
    cut_at = time.monotonic()

    near = worker_process(
        "--concurrency", "2", "--worker-id", "near", env=worker_env(DATABASE_URL=net_pg.url("q"))
    )
    during = enqueue_sql(dsn, 4, kwargs={"label": "during"})
    # The far worker cannot extend its leases: they lapse and the near worker takes over.
    book = wait_terminal(dsn, cut_jobs + during, timeout=60)
    recover = time.monotonic() - cut_at
    assert book.states == {"succeeded": 6}, book
    for job_id in cut_jobs:
        (worker_ids, errors, result) = query(
            dsn, "SELECT worker_ids, errors, result FROM pgqueue_job WHERE id = %s", (job_id,)
        )[0]
        assert worker_ids == ["far", "near"]
        assert errors[-1]["exception_class_path"] == "django_pgqueue.exceptions.LeaseExpired"
        assert errors[-1]["worker_id"] == "far"
        assert result == TASK_SECONDS

    # Keep the link down until the far worker's tasks have returned, then heal it:
    # their completions reach the database late and are refused by the token guard.
    time.sleep(max(0.0, TASK_SECONDS + 1 - (time.monotonic() - started)))
    net.heal()
    wait_until(lambda: "lease lost" in far.output(), 90, "the far worker to hear back")

    # It rejoins without a restart: with the near worker gone, only it can run these.
    near.signal(signal.SIGTERM)
    assert near.wait(30) == 0, near.output()
    after = enqueue_sql(dsn, 4, kwargs={"label": "after"})
    book_after = wait_terminal(dsn, after, timeout=90)
    assert book_after.states == {"succeeded": 4}, book_after
    rows = query(dsn, "SELECT worker_ids FROM pgqueue_job WHERE id = ANY(%s)", (after,))
    assert all(worker_ids == ["far"] for (worker_ids,) in rows)
    assert far.proc.poll() is None  # the same process all along
    assert "Task thread" not in far.output()  # no task thread died or was replaced

    total = ledger(dsn, cut_jobs + during + after)
    assert not total.lost and not total.stuck, total
    far.signal(signal.SIGTERM)
    assert far.wait(30) == 0, far.output()
    # Its two late completions were refused (fenced), its four new ones written.
    [stopped] = [line for line in far.output().splitlines() if "Worker far stopped" in line]
    assert "'lease_lost': 2" in stopped and "'succeeded': 4" in stopped, stopped
    rows = query(dsn, "SELECT status, worker_ids FROM pgqueue_job WHERE id = ANY(%s)", (cut_jobs,))
    assert rows == [("succeeded", ["far", "near"])] * 2, rows  # untouched by the late writes
    summary(
        faults=1,
        tasks=total.tasks,
        duplicates=total.duplicates,
        lost=len(total.lost),
        recover=recover,
        note="link cut mid-task; late completions fenced; rejoined; threads intact",
    )
