"""Workers as real processes: NOTIFY wake-ups, SIGTERM drain, the supervisor, the claim plan."""

from __future__ import annotations

import signal
import time

import pytest
from django.db import connection

from django_pgqueue import sql
from django_pgqueue.models import Job
from testproject.demo import tasks
from testproject.demo.models import TaskRun

from ..conftest import job_status, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_notify_wakes_an_idle_worker_long_before_the_poll(worker_process):
    proc = worker_process(
        "--poll-interval", "30", "--concurrency", "1", env={"PGQUEUE_LOG_LEVEL": "INFO"}
    )
    proc.wait_line("", timeout=30)  # the start-up log line: the worker is up
    wait_for(lambda: _listening(), 30, "the worker's LISTEN connection", interval=0.05)
    # Let the start-up sweep finish, so only a NOTIFY can wake the worker now.
    time.sleep(0.5)
    result = tasks.add.enqueue(1, 2)
    wait_for(lambda: job_status(result.id) == "succeeded", 25, "the job to run")
    # By the database's clock, from the INSERT to the claim: the worker's next poll is
    # about 30 s away, so only the NOTIFY explains a start within a third of that.
    job = Job.objects.get(pk=result.id)
    assert (job.started_at - job.created_at).total_seconds() < 10
    proc.signal(signal.SIGTERM)
    assert proc.wait(30) == 0


def _listening() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'pgqueue-listen-%%'"
        )
        return cursor.fetchone()[0] > 0


def test_sigterm_lets_in_flight_tasks_finish(worker_process):
    running = tasks.record_run.enqueue("slow", sleep=2.0)
    proc = worker_process(
        "--concurrency",
        "1",
        "--prefetch",
        "0",
        env={"PGQUEUE_TEST_HOOKS": "1", "PGQUEUE_TEST_PAUSE_AT": "before_task"},
    )
    proc.wait_line("PAUSED before_task", timeout=30)
    proc.resume()
    wait_for(lambda: job_status(running.id) == "in_progress", 10, "the task to start")
    proc.signal(signal.SIGTERM)
    later = tasks.record_run.enqueue("after sigterm")
    assert proc.wait(60) == 0
    assert job_status(running.id) == "succeeded"
    assert TaskRun.objects.filter(job_id=int(running.id)).count() == 1
    # Jobs enqueued after SIGTERM are not touched.
    job = Job.objects.get(pk=int(later.id))
    assert (job.status, job.attempts) == ("pending", 0)


def test_grace_period_over_releases_the_running_task(worker_process):
    running = tasks.sleep_for.enqueue(30)
    proc = worker_process(
        "--concurrency",
        "1",
        env={
            "PGQUEUE_SHUTDOWN_GRACE_SECONDS": "0.5",
            "PGQUEUE_TEST_HOOKS": "1",
            "PGQUEUE_TEST_PAUSE_AT": "before_task",
        },
    )
    proc.wait_line("PAUSED before_task", timeout=30)
    proc.resume()
    wait_for(lambda: job_status(running.id) == "in_progress", 10, "the task to start")
    proc.signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    job = Job.objects.get(pk=int(running.id))
    assert job.status == "failed"  # retried at once, not left for the lease
    assert job.locked_until is None
    assert "WorkerInterrupted" in job.last_error


def test_supervisor_restarts_a_killed_child(worker_process):
    from django_pgqueue import enqueue_many

    enqueue_many(tasks.kill_own_process, [((), {})])
    survivors = enqueue_many(tasks.record_run, [(("ok",), {})] * 20)
    proc = worker_process(
        "--processes",
        "2",
        "--burst",
        "--concurrency",
        "2",
        "--lease",
        "1",
        env={"PGQUEUE_POLL_INTERVAL": "0.2"},
    )
    assert proc.wait(90) == 0, proc.output()
    poison = Job.objects.get(task_path="testproject.demo.tasks.kill_own_process")
    assert (poison.status, poison.attempts) == ("dead", 3)
    assert "LeaseExpired" in poison.last_error
    assert "restarting" in proc.output()
    for result in survivors:
        assert job_status(result.id) == "succeeded"


def test_claim_uses_the_partial_indexes_after_analyze():
    from django_pgqueue import enqueue_many

    enqueue_many(tasks.add, [((1, 1), {})] * 3000)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgqueue_job SET status = 'succeeded', finished_at = now() "
            "WHERE id IN (SELECT id FROM pgqueue_job ORDER BY id LIMIT 2950)"
        )
        cursor.execute("ANALYZE pgqueue_job")
        cursor.execute("BEGIN")
        try:
            cursor.execute(
                "EXPLAIN "
                + sql.CLAIM_JOBS.replace("%(all_queues)s", "true")
                .replace("%(queues)s", "ARRAY[]::text[]")
                .replace("%(limit)s", "10")
                .replace("%(lease)s", "30")
                .replace("%(worker_id)s", "'explain'")
                .replace("%(floor)s", "NULL")
            )
            plan = "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("ROLLBACK")
    assert "pgq_job_due_idx" in plan, plan
    assert "pgq_job_lease_idx" in plan, plan
    assert "Seq Scan on pgqueue_job" not in plan, plan


def test_claim_sql_is_fenced_by_materialized_ctes():
    # PostgreSQL bug #15715: only a materialized CTE guarantees LIMIT is honoured.
    assert sql.CLAIM_JOBS.count("AS MATERIALIZED") == 2
    assert "FOR UPDATE SKIP LOCKED" in sql.CLAIM_JOBS
    assert "WHERE id IN (SELECT" not in sql.CLAIM_JOBS


def test_a_worker_that_does_not_exit_fails_the_test_with_its_threads_stacks(worker_process):
    """The harness itself: a wait that times out aborts the child, whose faulthandler
    names every thread's frames, so a shutdown that hangs in CI says where."""
    proc = worker_process("--concurrency", "1", env={"PGQUEUE_LOG_LEVEL": "INFO"})
    proc.wait_line("", timeout=30)
    with pytest.raises(AssertionError) as failed:
        proc.wait(0.5)  # a healthy worker runs on: the wait times out
    message = str(failed.value)
    assert "still running after" in message
    assert "(most recent call first)" in message, message[-2000:]
    assert "_claim_loop" in message or "_wait_for_work" in message, message[-2000:]
    assert proc.proc.returncode == -signal.SIGABRT
