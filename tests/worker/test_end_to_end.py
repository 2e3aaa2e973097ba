"""The worker end to end: run, retry, DLQ, context, signals, leases and fencing."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from django_pgqueue import sql
from django_pgqueue.compat import TaskResultStatus, task_finished, task_started
from django_pgqueue.db import connect
from django_pgqueue.models import Job
from testproject.demo import tasks
from testproject.demo.models import TaskRun

from ..conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_success_stores_json_result(run_worker):
    result = tasks.add.enqueue(2, 40)
    worker = run_worker()
    fetched = tasks.add.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.return_value == 42
    assert fetched.attempts == 1
    assert fetched.worker_ids == [worker.worker_id]
    assert fetched.started_at and fetched.finished_at and fetched.last_attempted_at
    job = Job.objects.get(pk=int(result.id))
    assert job.locked_until is None and job.finished_at is not None


def test_async_task_runs(run_worker):
    result = tasks.async_ping.enqueue(21)
    run_worker()
    assert tasks.async_ping.get_result(result.id).return_value == 42


def test_context_attempt_counts_real_attempts(run_worker, settings):
    settings.TASKS = {
        "default": {
            **settings.TASKS["default"],
            "OPTIONS": {"MAX_ATTEMPTS": 5, "BACKOFF": "tests.worker.test_end_to_end.no_wait"},
        }
    }
    result = tasks.flaky_charge.enqueue(7, fail_times=2)
    # Each burst run stops once nothing is due; retries are due at once here.
    run_worker()
    fetched = tasks.flaky_charge.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.return_value == {"order_id": 7, "charged": True, "attempts": 3}
    assert fetched.attempts == 3
    assert [e.exception_class_path for e in fetched.errors] == ["builtins.ConnectionError"] * 2
    assert "payment gateway timed out (attempt 1)" in fetched.errors[0].traceback


def no_wait(exception, task_result):
    return 0


def test_retry_is_scheduled_with_backoff_then_dead(run_worker, settings):
    # A backoff long enough that the burst worker cannot see the retry come due.
    settings.TASKS = {
        "default": {
            **settings.TASKS["default"],
            "OPTIONS": {"MAX_ATTEMPTS": 5, "BACKOFF": "tests.worker.test_end_to_end.ten_minutes"},
        }
    }
    result = tasks.always_fails.enqueue(1)
    run_worker()
    job = Job.objects.get(pk=int(result.id))
    # The backoff scheduled the retry ten minutes out.
    assert job.status == "failed"
    assert job.attempts == 1
    assert job.next_attempt_at > timezone.now() + dt.timedelta(minutes=9)
    assert job.last_error == "ValueError: order 1 has an invalid address"
    assert tasks.always_fails.get_result(result.id).status == TaskResultStatus.READY
    # Make retries due immediately until attempts run out (max_attempts=3).
    for _ in range(2):
        Job.objects.filter(pk=job.pk).update(next_attempt_at=timezone.now())
        run_worker()
    job.refresh_from_db()
    assert job.status == "dead"
    assert job.attempts == 3
    assert len(job.errors) == 3
    fetched = tasks.always_fails.get_result(result.id)
    assert fetched.status == TaskResultStatus.FAILED
    assert len(fetched.errors) == 3
    # The DLQ is never claimed again.
    run_worker()
    job.refresh_from_db()
    assert job.attempts == 3


def ten_minutes(exception, task_result):
    return 600


def test_backoff_returning_none_stops_retrying(run_worker, settings):
    settings.TASKS = {
        "default": {
            **settings.TASKS["default"],
            "OPTIONS": {"MAX_ATTEMPTS": 5, "BACKOFF": "tests.worker.test_end_to_end.never"},
        }
    }
    result = tasks.always_fails.enqueue(2)
    run_worker()
    job = Job.objects.get(pk=int(result.id))
    assert (job.status, job.attempts) == ("dead", 1)


def never(exception, task_result):
    return None


def test_signals_started_and_finished(run_worker):
    events = []

    def started(sender, task_result, **kwargs):
        events.append(("started", task_result.id, task_result.status))

    def finished(sender, task_result, **kwargs):
        events.append(("finished", task_result.id, task_result.status))

    task_started.connect(started)
    task_finished.connect(finished)
    try:
        result = tasks.add.enqueue(1, 2)
        run_worker()
    finally:
        task_started.disconnect(started)
        task_finished.disconnect(finished)
    assert events == [
        ("started", result.id, TaskResultStatus.RUNNING),
        ("finished", result.id, TaskResultStatus.SUCCESSFUL),
    ]


def test_the_started_signal_carries_the_rows_times(run_worker):
    """The claim returns the row's times as epoch seconds; the TaskResult a receiver
    sees has them as aware datetimes equal to the row's, to the microsecond."""
    seen = []

    def started(sender, task_result, **kwargs):
        seen.append(task_result)

    result = tasks.add.enqueue(1, 2)
    task_started.connect(started)
    try:
        run_worker()
    finally:
        task_started.disconnect(started)
    (running,) = seen
    job = Job.objects.get(pk=int(result.id))
    assert running.enqueued_at == job.created_at
    assert running.started_at == job.started_at
    assert running.last_attempted_at == job.last_attempted_at
    assert running.enqueued_at.utcoffset() == dt.timedelta(0)


def test_not_a_task_goes_to_dead_and_worker_keeps_running(run_worker):
    bad = Job.objects.create(task_path="testproject.demo.tasks.not_a_task", max_attempts=5)
    good = tasks.add.enqueue(1, 1)
    run_worker()
    bad.refresh_from_db()
    assert bad.status == "dead"
    assert "not a Task" in bad.last_error
    assert Job.objects.get(pk=int(good.id)).status == "succeeded"


def test_unknown_task_path_is_put_back_not_burnt(run_worker, settings):
    settings.PGQUEUE = {**settings.PGQUEUE, "UNKNOWN_TASK_DELAY": 3600}
    job = Job.objects.create(task_path="shop.tasks.not_deployed_yet", max_attempts=2)
    run_worker()
    job.refresh_from_db()
    assert job.status == "pending"
    assert job.attempts == 0  # the claim's attempt was refunded
    assert job.worker_ids == []
    assert job.next_attempt_at > timezone.now() + dt.timedelta(minutes=50)
    assert "ImportError" in job.last_error


def test_priority_orders_claims(run_worker):
    low = tasks.record_run.using(priority=-10).enqueue("low")
    high = tasks.record_run.using(priority=10).enqueue("high")
    run_worker(concurrency=1, prefetch=0)
    runs = list(TaskRun.objects.order_by("id").values_list("job_id", flat=True))
    assert runs == [int(high.id), int(low.id)]


def test_deferred_job_waits_for_run_after(run_worker):
    later = tasks.add.using(run_after=timezone.now() + dt.timedelta(hours=1)).enqueue(1, 1)
    now = tasks.add.enqueue(2, 2)
    run_worker()
    assert Job.objects.get(pk=int(later.id)).status == "pending"
    assert Job.objects.get(pk=int(now.id)).status == "succeeded"


def test_queues_option_limits_claims(run_worker):
    email = tasks.send_receipt.enqueue(1)
    other = tasks.add.enqueue(1, 1)
    run_worker(queues=["emails"])
    assert Job.objects.get(pk=int(email.id)).status == "succeeded"
    assert Job.objects.get(pk=int(other.id)).status == "pending"


def _claim(worker_id: str, limit: int = 10, lease: float = 30.0):
    with connect("test-claim") as conn:
        return conn.execute(
            sql.CLAIM_JOBS,
            {
                "all_queues": True,
                "queues": [],
                "limit": limit,
                "lease": lease,
                "worker_id": worker_id,
                "floor": None,
            },
        ).fetchall()


def _complete(job_id: int, token, status: str = "succeeded") -> list:
    with connect("test-complete") as conn:
        return conn.execute(
            sql.COMPLETE_JOBS,
            {
                "ids": [job_id],
                "tokens": [token],
                "statuses": [status],
                "results": ["1"],
                "delays": [0.0],
                "errors": [None],
                "last_errors": [None],
                "refunds": [0],
                "channel": "pgqueue_test",  # where released workflow steps are announced
            },
        ).fetchall()


def _lapsed(job_id: int) -> bool:
    """Whether the row's lease has lapsed by the database's clock, the one the claim
    reads (``now()``): once this is true, every later claim sees it lapsed too."""
    with connect("test") as conn:
        row = conn.execute(
            "SELECT locked_until < now() FROM pgqueue_job WHERE id = %s", [job_id]
        ).fetchone()
    return bool(row and row[0])


def test_lapsed_lease_is_reclaimed_with_a_new_token(run_worker):
    result = tasks.add.enqueue(1, 1)
    (row,) = _claim("crashed-worker", lease=0.2)
    token_a = row[2]
    assert row[0] == int(result.id)
    assert _claim("other") == []  # leased: not claimable yet
    wait_for(lambda: _lapsed(row[0]), 5, "lease lapse")
    worker = run_worker()
    job = Job.objects.get(pk=row[0])
    assert job.status == "succeeded"
    assert job.attempts == 2
    assert job.locked_by != token_a
    assert job.worker_ids == ["crashed-worker", worker.worker_id]
    assert job.errors[0]["exception_class_path"] == "django_pgqueue.exceptions.LeaseExpired"


def test_stale_worker_cannot_complete_a_reclaimed_row():
    result = tasks.add.enqueue(1, 1)
    (row_a,) = _claim("A")
    Job.objects.filter(pk=row_a[0]).update(locked_until=timezone.now() - dt.timedelta(seconds=1))
    (row_b,) = _claim("B")
    assert row_b[0] == row_a[0] and row_b[2] != row_a[2]
    assert _complete(row_a[0], row_a[2]) == []  # fenced: A's token is stale
    job = Job.objects.get(pk=int(result.id))
    assert (job.status, job.locked_by) == ("in_progress", row_b[2])
    assert _complete(row_b[0], row_b[2]) == [(row_b[0],)]
    assert Job.objects.get(pk=int(result.id)).status == "succeeded"
    assert _complete(row_b[0], row_b[2]) == []  # a second completion changes nothing


def test_exhausted_lapsed_row_goes_dead_at_claim_without_running():
    job = Job.objects.create(task_path="testproject.demo.tasks.add", max_attempts=1, args=[1, 1])
    (row,) = _claim("dies", lease=0.1)
    assert row[3] == 1
    wait_for(lambda: _lapsed(job.pk), 5, "lease lapse")
    (again,) = _claim("next")
    assert again[1] == "dead"
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("dead", 1)
    assert "LeaseExpired" in job.last_error
    assert _claim("later") == []


def test_concurrent_workers_claim_disjoint_rows(run_worker):
    from django_pgqueue import enqueue_many

    enqueue_many(tasks.record_run, [(("c",), {})] * 300)
    import threading

    from django_pgqueue.worker import Worker

    workers = [Worker(burst=True, concurrency=3, install_signal_handlers=False) for _ in range(3)]
    threads = [threading.Thread(target=w.run) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    runs = list(TaskRun.objects.values_list("job_id", flat=True))
    assert len(runs) == 300
    assert len(set(runs)) == 300
    assert set(Job.objects.values_list("status", flat=True)) == {"succeeded"}
    assert sum(Job.objects.values_list("attempts", flat=True)) == 300
