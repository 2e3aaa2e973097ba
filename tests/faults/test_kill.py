"""kill -9 of worker processes at named points, then recovery (catalogue Q3, Q6, Q8).

Each test pauses a real ``runworkers`` process at a hook point, kills it with
SIGKILL and lets a second worker recover the job through the lease. The handler
log (demo ``TaskRun`` rows) shows how often each job really ran.
"""

from __future__ import annotations

import datetime as dt
import signal
import time

import pytest

from django_pgqueue import sql
from django_pgqueue.db import connect

from .conftest import LEASE, worker_env
from .helpers import (
    count_text,
    db_now,
    job,
    ledger,
    paused_fields,
    query,
    wait_terminal,
    wait_text,
    wait_until,
)

pytestmark = [pytest.mark.fault, pytest.mark.timeout(60), pytest.mark.django_db(transaction=True)]

ONE_AT_A_TIME = ("--concurrency", "1", "--prefetch", "0")


def _claim_as(worker_id: str) -> list[tuple]:
    with connect("test-claim") as conn:
        return conn.execute(
            sql.CLAIM_JOBS,
            {
                "all_queues": True,
                "queues": [],
                "limit": 10,
                "lease": 30.0,
                "worker_id": worker_id,
                "floor": None,
            },
        ).fetchall()


@pytest.mark.parametrize(
    ("point", "runs_before_kill"),
    [("after_claim", 0), ("during_task", 0), ("after_task", 1)],
)
def test_kill9_at_point_then_lease_recovers(
    worker_process, test_dsn, summary, point, runs_before_kill
):
    from testproject.demo import tasks

    # The task sleeps so that "during_task" kills it in the middle of its work.
    sleep = 0.5 if point == "during_task" else 0.0
    job_id = int(tasks.record_run.enqueue(point, sleep=sleep).id)
    hook = "before_task" if point == "during_task" else point
    a = worker_process(*ONE_AT_A_TIME, env=worker_env(PGQUEUE_TEST_PAUSE_AT=hook))
    _, paused_id, token_a = paused_fields(a.wait_line(f"PAUSED {hook}"))
    assert paused_id == job_id
    if point == "during_task":
        a.resume()  # the task starts; kill it while it runs
    a.kill()
    killed_at = time.monotonic()
    assert a.proc.returncode == -signal.SIGKILL

    row = job(test_dsn, job_id)
    assert (row["status"], row["locked_by"], row["attempts"]) == ("in_progress", token_a, 1)
    assert ledger(test_dsn, [job_id]).runs == runs_before_kill
    lease_end = row["locked_until"]

    # Worker B starts at once; meanwhile no claim may take the row before the lease
    # ends (by the database clock).
    b = worker_process(*ONE_AT_A_TIME, env=worker_env())
    polls = 0
    while db_now(test_dsn) < lease_end - dt.timedelta(milliseconds=100):
        assert job(test_dsn, job_id)["locked_by"] == token_a
        polls += 1
        time.sleep(0.05)
    book = wait_terminal(test_dsn, [job_id], timeout=10)
    recover = time.monotonic() - killed_at

    row = job(test_dsn, job_id)
    assert row["status"] == "succeeded"
    assert row["attempts"] == 2
    assert row["locked_by"] != token_a
    assert row["last_attempted_at"] >= lease_end  # B claimed only after the lease ended
    assert row["errors"][0]["exception_class_path"] == "django_pgqueue.exceptions.LeaseExpired"
    assert book.runs == runs_before_kill + 1
    assert not book.lost
    assert polls > 0
    b.signal(signal.SIGTERM)
    assert b.wait(15) == 0
    summary(
        faults=1,
        tasks=1,
        duplicates=book.duplicates,
        lost=len(book.lost),
        recover=recover,
        note=f"kill -9 at {point}; lease {LEASE}s",
    )


def test_claims_never_take_a_live_lease(test_dsn):
    """The lease is the only thing that frees a row: a live one is never claimed early."""
    from testproject.demo import tasks

    job_id = int(tasks.add.enqueue(1, 2).id)
    with connect("test-claim") as conn:
        (row,) = conn.execute(
            sql.CLAIM_JOBS,
            {
                "all_queues": True,
                "queues": [],
                "limit": 1,
                "lease": 0.6,
                "worker_id": "A",
                "floor": None,
            },
        ).fetchall()
    lease_end = job(test_dsn, job_id)["locked_until"]
    while db_now(test_dsn) < lease_end - dt.timedelta(milliseconds=100):
        assert _claim_as("B") == []
        time.sleep(0.05)
    wait_until(lambda: db_now(test_dsn) > lease_end, 5, "lease end")
    (again,) = _claim_as("B")
    assert again[0] == job_id and again[2] != row[2] and again[3] == 2


def test_poison_that_kills_its_worker_goes_dead_after_max_attempts(
    worker_process, test_dsn, summary
):
    """Q6: each attempt kills the process; the supervisor restarts it; attempt 3 ends in the DLQ."""
    from testproject.demo import tasks

    poison = int(tasks.kill_own_process.enqueue().id)  # max_attempts=3
    started = time.monotonic()
    sup = worker_process(
        "--processes",
        "2",
        *ONE_AT_A_TIME,
        env=worker_env(PGQUEUE_LEASE_SECONDS="1", PGQUEUE_LOG_LEVEL="WARNING"),
    )
    wait_until(lambda: job(test_dsn, poison)["status"] == "dead", 30, "poison in the DLQ")
    dead_at = time.monotonic()
    row = job(test_dsn, poison)
    assert row["attempts"] == 3
    assert "LeaseExpired" in row["last_error"]
    assert len(row["worker_ids"]) == 3
    # Never claimed again: watch three leases' worth with live workers.
    wait_until(lambda: count_text(sup, "exited with -9") >= 3, 10, "three restarts")
    healthy = int(tasks.record_run.enqueue("after-poison").id)
    wait_terminal(test_dsn, [healthy], timeout=15)
    deadline = time.monotonic() + 3 * 1.0
    while time.monotonic() < deadline:
        assert job(test_dsn, poison)["attempts"] == 3
        time.sleep(0.1)
    restarts = count_text(sup, "exited with -9")
    assert restarts == 3, sup.output()
    sup.signal(signal.SIGTERM)
    assert sup.wait(20) == 0
    summary(
        faults=restarts,
        tasks=2,
        duplicates=0,
        lost=0,
        recover=dead_at - started,
        note="poison kill -9 x3 -> dead; supervisor restarted each time",
    )


def test_poison_that_always_raises_goes_dead_and_stays_dead(run_worker, settings, summary):
    from django_pgqueue.models import Job
    from testproject.demo import tasks

    settings.TASKS = {
        "default": {
            **settings.TASKS["default"],
            "OPTIONS": {"MAX_ATTEMPTS": 5, "BACKOFF": "tests.faults.test_kill.no_wait"},
        }
    }
    poison = int(tasks.always_fails.enqueue(7).id)  # max_attempts=3
    run_worker()
    row = Job.objects.get(pk=poison)
    assert (row.status, row.attempts, len(row.errors)) == ("dead", 3, 3)
    assert row.last_error == "ValueError: order 7 has an invalid address"
    run_worker()  # the DLQ is never claimed
    row.refresh_from_db()
    assert (row.status, row.attempts) == ("dead", 3)
    summary(faults=3, tasks=1, duplicates=0, lost=0, note="raises always -> dead after 3")


def no_wait(exception, task_result):
    return 0


def test_graceful_sigterm_drains_releases_and_stops_claiming(worker_process, test_dsn, summary):
    """Q8: two tasks finish within the grace period, the long one is released as interrupted."""
    from testproject.demo import tasks

    quick = [int(tasks.mark_then_sleep.enqueue(f"q{i}", 0.6).id) for i in range(2)]
    long = int(tasks.mark_then_sleep.enqueue("long", 20).id)
    w = worker_process(
        "--concurrency",
        "3",
        "--prefetch",
        "0",
        env=worker_env(PGQUEUE_SHUTDOWN_GRACE_SECONDS="1.5", PGQUEUE_LEASE_SECONDS="30"),
    )
    # Wait for the three tasks to have *started*: a claimed row still queued for a thread
    # when SIGTERM arrives is released unstarted (pending, attempt refunded), by design.
    wait_until(
        lambda: query(test_dsn, "SELECT count(*) FROM demo_taskrun")[0][0] == 3,
        15,
        "three tasks started",
    )
    w.signal(signal.SIGTERM)
    signalled = time.monotonic()
    wait_text(w, "no new claims", timeout=5)
    late = [int(tasks.record_run.enqueue(f"late{i}").id) for i in range(2)]
    assert w.wait(15) == 0
    stopped = time.monotonic() - signalled
    for job_id in quick:
        assert job(test_dsn, job_id)["status"] == "succeeded"
    row = job(test_dsn, long)
    assert row["status"] == "failed"
    assert row["locked_until"] is None
    assert row["next_attempt_at"] <= db_now(test_dsn)  # retried at once, not after a lease
    assert row["errors"][-1]["exception_class_path"].endswith("WorkerInterrupted")
    for job_id in late:
        row = job(test_dsn, job_id)
        assert (row["status"], row["attempts"]) == ("pending", 0)
    assert stopped < 1.5 + 3
    summary(faults=1, tasks=5, duplicates=0, lost=0, recover=stopped, note="SIGTERM drain")


def test_sigterm_releases_prefetched_rows_unstarted_with_the_attempt_refunded(
    worker_process, test_dsn, summary
):
    """Rows claimed ahead of a free thread go back to pending untouched on SIGTERM."""
    from testproject.demo import tasks

    running = int(tasks.mark_then_sleep.enqueue("running", 2.0).id)
    queued = [int(tasks.record_run.enqueue(f"queued{i}").id) for i in range(3)]
    w = worker_process(
        "--concurrency", "1", "--prefetch", "3", env=worker_env(PGQUEUE_LEASE_SECONDS="30")
    )
    wait_until(
        lambda: query(test_dsn, "SELECT count(*) FROM demo_taskrun")[0][0] == 1,
        15,
        "the first task started",
    )
    held = query(
        test_dsn,
        "SELECT count(*) FROM pgqueue_job WHERE status = 'in_progress' AND id = ANY(%s)",
        (queued,),
    )[0][0]
    assert held == 3  # claimed with the first one, waiting for the only thread
    w.signal(signal.SIGTERM)
    assert w.wait(15) == 0
    assert job(test_dsn, running)["status"] == "succeeded"
    for job_id in queued:
        row = job(test_dsn, job_id)
        assert (row["status"], row["attempts"], row["locked_until"], row["errors"]) == (
            "pending",
            0,
            None,
            [],
        )
    assert query(test_dsn, "SELECT count(*) FROM demo_taskrun")[0][0] == 1
    summary(faults=1, tasks=4, duplicates=0, lost=0, note="SIGTERM with 3 prefetched rows")


def test_restart_after_kill_during_load_loses_nothing(worker_process, test_dsn, summary):
    """Kill -9 one of two workers mid-run; the survivor and a restart finish every job."""
    from django_pgqueue import enqueue_many
    from testproject.demo import tasks

    ids = [int(r.id) for r in enqueue_many(tasks.record_run, [(("k",), {"sleep": 0.01})] * 400)]
    a = worker_process("--concurrency", "4", env=worker_env(PGQUEUE_LOG_LEVEL="WARNING"))
    b = worker_process("--concurrency", "4", env=worker_env(PGQUEUE_LOG_LEVEL="WARNING"))
    wait_until(lambda: ledger(test_dsn, ids).runs >= 100, 30, "100 runs")
    a.kill()
    killed = time.monotonic()
    a2 = worker_process("--concurrency", "4", env=worker_env(PGQUEUE_LOG_LEVEL="WARNING"))
    book = wait_terminal(test_dsn, ids, timeout=30)
    recover = time.monotonic() - killed
    assert book.states == {"succeeded": 400}
    assert not book.lost
    assert book.runs == 400 + book.duplicates
    for w in (b, a2):
        w.signal(signal.SIGTERM)
        assert w.wait(15) == 0
    summary(
        faults=1,
        tasks=400,
        duplicates=book.duplicates,
        lost=0,
        recover=recover,
        note="kill -9 one of two busy workers",
    )
