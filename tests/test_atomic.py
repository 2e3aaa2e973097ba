"""Atomic tasks: claim, body and completion in one transaction on the queue database."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import uuid

import pytest
from django.utils import timezone

from django_pgqueue import retry, task
from django_pgqueue.models import Job
from django_pgqueue.testing import run_queued_jobs
from testproject.demo import tasks
from testproject.demo.models import TaskRun

from .conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_success_commits_the_effect_and_the_completion_together(run_worker):
    result = tasks.record_atomic.enqueue(label="ok")
    job = Job.objects.get(pk=int(result.id))
    assert job.atomic and job.status == "pending"
    worker = run_worker(burst=True)
    job.refresh_from_db()
    assert (job.status, job.attempts, job.result) == ("succeeded", 1, 1)
    assert job.locked_until is None and job.finished_at is not None
    assert job.worker_ids == [worker.worker_id]
    assert list(TaskRun.objects.values_list("job_id", "label")) == [(job.pk, "ok")]


def test_failure_rolls_back_the_effect_and_records_the_attempt(settings):
    # A fixed backoff: the test settings' jittered one may make the retry due at once.
    settings.TASKS = {
        "default": {
            **settings.TASKS["default"],
            "OPTIONS": {"BACKOFF": "tests.worker.test_supervision.ten_minutes"},
        }
    }
    result = tasks.record_atomic.enqueue(label="boom", fail=True)
    report = run_queued_jobs(retries="wait")  # one attempt
    job = Job.objects.get(pk=int(result.id))
    assert report.count("failed", "atomic") == 1
    assert (job.status, job.attempts) == ("failed", 1)
    assert job.errors[0]["exception_class_path"] == "builtins.RuntimeError"
    assert "must roll back" in job.last_error
    assert job.next_attempt_at > job.last_attempted_at  # a retry with backoff
    assert not TaskRun.objects.exists()  # the effect went with the rollback
    run_queued_jobs()  # the remaining attempts, at once
    job.refresh_from_db()
    assert (job.status, job.attempts, len(job.errors)) == ("dead", 3, 3)
    assert not TaskRun.objects.exists()


def test_the_lease_claim_leaves_atomic_rows_to_the_atomic_source(run_worker):
    from django_pgqueue.worker.runner import TaskRunner
    from django_pgqueue.worker.sources import JobSource

    atomic = tasks.record_atomic.enqueue(label="a")
    plain = tasks.add.enqueue(1, 2)
    worker = run_worker(burst=True, sources=[JobSource(TaskRunner("t", 60.0))])
    assert Job.objects.get(pk=int(plain.id)).status == "succeeded"
    assert Job.objects.get(pk=int(atomic.id)).status == "pending"
    assert worker.claimed == 1


def test_the_transaction_is_bounded_by_the_timeout_setting(run_worker, settings, monkeypatch):
    settings.PGQUEUE = {**settings.PGQUEUE, "ATOMIC_TIMEOUT_SECONDS": 0.5}
    # Full jitter may make the retry due at once, and retries="wait" would run it:
    # the retry is put a minute away, so this run makes exactly the one attempt.
    monkeypatch.setattr(retry, "exponential_delay", lambda *args, **kwargs: 60.0)
    result = tasks.record_atomic.enqueue(label="slow", sleep=1.5)
    run_queued_jobs(retries="wait")
    job = Job.objects.get(pk=int(result.id))
    # The attempt's deadline (ATOMIC_TIMEOUT_SECONDS) gave it up, or the session's
    # idle_in_transaction_session_timeout ended it while the task slept: either way
    # one attempt, counted, and none of its writes committed.
    assert job.status == "failed" and job.attempts == 1
    assert not TaskRun.objects.exists()
    error = job.last_error.lower()
    assert "timeout" in error or "terminat" in error or "connection" in error, error


def test_testing_helper_runs_atomic_jobs():
    tasks.record_atomic.enqueue(label="helper")
    report = run_queued_jobs()
    assert report.succeeded == 1
    assert TaskRun.objects.get().label == "helper"


def test_enqueue_many_writes_atomic_rows():
    from django_pgqueue import enqueue_many

    results = enqueue_many(tasks.record_atomic, [((), {"label": str(n)}) for n in range(3)])
    assert Job.objects.filter(pk__in=[int(r.id) for r in results], atomic=True).count() == 3


# -- attempts that count themselves ---------------------------------------------------
#
# The tasks below record an *outside* effect (a list in this process, as an HTTP call
# or a file would be: no transaction takes it back), so a test can count how often a
# body really ran, rolled back or not.

_outside: list[str] = []
_outside_lock = threading.Lock()


def _outside_effect(label: str) -> None:
    with _outside_lock:
        _outside.append(label)


def outside_runs(label: str) -> int:
    with _outside_lock:
        return _outside.count(label)


@pytest.fixture(autouse=True)
def _fresh_outside_effects():
    with _outside_lock:
        _outside.clear()


@task(atomic=True, max_attempts=2)
def fails_after_an_outside_effect(label: str) -> None:
    _outside_effect(label)
    time.sleep(0.02)  # long enough for another thread to look for due rows meanwhile
    raise RuntimeError(f"{label}: fails every time")


@task(atomic=True, max_attempts=2)
def hangs_past_the_atomic_timeout(label: str, seconds: float) -> None:
    _outside_effect(label)
    time.sleep(seconds)  # no statement meanwhile: the session is ended while idle


def test_max_attempts_holds_exactly_under_threads_and_workers(run_worker):
    labels = [f"job-{n}" for n in range(8)]
    ids = [int(fails_after_an_outside_effect.enqueue(label).id) for label in labels]
    workers = [run_worker(burst=False, concurrency=4) for _ in range(2)]
    wait_for(
        lambda: Job.objects.filter(pk__in=ids, status="dead").count() == len(ids),
        30,
        "every job to use up its two attempts",
    )
    for worker in workers:
        worker.stop()
    rows = {job.pk: job for job in Job.objects.filter(pk__in=ids)}
    for job_id, label in zip(ids, labels, strict=True):
        assert rows[job_id].attempts == 2
        assert len(rows[job_id].errors) == 2
        assert outside_runs(label) == 2, (label, rows[job_id].errors)


def test_a_hung_atomic_task_keeps_its_job_and_gives_back_its_thread(run_worker, settings):
    settings.PGQUEUE = {**settings.PGQUEUE, "ATOMIC_TIMEOUT_SECONDS": 0.5}
    hung = int(hangs_past_the_atomic_timeout.enqueue("hung", 3.0).id)
    worker = run_worker(burst=False, concurrency=1)
    wait_for(lambda: outside_runs("hung") == 1, 10, "the hung task to start")
    behind = int(tasks.add.enqueue(2, 3).id)
    # One task thread: the job behind runs only because the hung one gave its slot back.
    wait_for(lambda: Job.objects.get(pk=behind).status == "succeeded", 10, "the job behind it")
    row = Job.objects.get(pk=hung)
    # Its session is gone (the timeout ended it) but its thread still runs: the job is
    # counted and fenced, and nobody claimed it again.
    assert (row.status, row.attempts, outside_runs("hung")) == ("in_progress", 1, 1)
    assert worker.replaced == 1
    wait_for(
        lambda: Job.objects.get(pk=hung).status == "dead", 20, "the job to use up its attempts"
    )
    row.refresh_from_db()
    assert (row.attempts, len(row.errors), outside_runs("hung")) == (2, 2, 2)
    assert not TaskRun.objects.exists()


def test_a_lapsed_atomic_row_is_counted_by_the_atomic_claim_only(run_worker):
    from django_pgqueue.db import connect
    from django_pgqueue.worker.runner import TaskRunner
    from django_pgqueue.worker.sources import JobSource

    lapsed = int(tasks.record_atomic.enqueue(label="lapsed").id)
    spent = int(tasks.record_atomic.enqueue(label="spent").id)
    # Two rows whose worker was killed mid-task: one with an attempt left, one without.
    for job_id, attempts in ((lapsed, 1), (spent, 3)):
        Job.objects.filter(pk=job_id).update(
            status="in_progress",
            attempts=attempts,
            locked_by=uuid.uuid4(),
            locked_until=timezone.now() - dt.timedelta(seconds=1),
            worker_id="killed",
        )
    params = {"all_queues": True, "queues": [], "limit": 10, "lease": 30.0, "worker_id": "t"}
    with connect("test-lapsed") as conn:
        # The leased claim would run it outside any transaction: it leaves it alone.
        assert JobSource(TaskRunner("t", 60.0)).claim(conn, params) == []
    run_worker(burst=True)
    rows = {job.pk: job for job in Job.objects.filter(pk__in=[lapsed, spent])}
    assert (rows[lapsed].status, rows[lapsed].attempts) == ("succeeded", 2)
    assert rows[lapsed].errors[0]["exception_class_path"].endswith("LeaseExpired")
    assert (rows[spent].status, rows[spent].attempts) == ("dead", 3)
    assert list(TaskRun.objects.values_list("label", flat=True)) == ["lapsed"]


def test_attempt_log_lines_name_the_job_and_count_only_attempts(run_worker, caplog):
    ok = int(tasks.record_atomic.enqueue(label="logged").id)
    with caplog.at_level(logging.INFO, logger="django_pgqueue.worker"):
        worker = run_worker(burst=True, concurrency=4)
    lines = [r.getMessage() for r in caplog.records if getattr(r, "event", "") == "attempt"]
    assert lines == [
        f"atomic {ok} testproject.demo.tasks.record_atomic attempt=1 "
        f"duration={lines[0].split('duration=')[1].split()[0]} outcome=succeeded"
    ]
    assert worker.outcomes == {"succeeded": 1}


@task(atomic=True, timeout=0.3, max_attempts=2)
def outlives_its_own_timeout(label: str, seconds: float) -> str:
    from testproject.demo.models import TaskRun

    _outside_effect(label)
    time.sleep(seconds)  # past the task's timeout, well within the transaction's
    TaskRun.objects.create(job_id=0, attempt=1, pid=0, label=label)
    return label


def test_an_atomic_task_past_its_own_timeout_commits_what_it_came_to(run_worker):
    late = int(outlives_its_own_timeout.enqueue("late", 1.5).id)
    worker = run_worker(burst=False, concurrency=1)
    wait_for(lambda: worker.replaced == 1, 10, "the thread to be given up at its timeout")
    row = Job.objects.get(pk=late)
    assert (row.status, row.attempts) == ("in_progress", 1)  # held, not retried meanwhile
    wait_for(lambda: Job.objects.get(pk=late).status == "succeeded", 10, "the task to return")
    row.refresh_from_db()
    # Its transaction was still open: what it wrote and its success committed together.
    assert (row.attempts, row.result, outside_runs("late")) == (1, "late", 1)
    assert list(TaskRun.objects.values_list("label", flat=True)) == ["late"]


def test_abort_of_a_running_atomic_job_cancels_it_and_rolls_its_writes_back(run_worker):
    import django_pgqueue

    running = tasks.record_atomic.enqueue(label="aborted", sleep=1.5)
    worker = run_worker(burst=False, concurrency=1, lease_seconds=1.5)
    wait_for(lambda: Job.objects.get(pk=int(running.id)).status == "in_progress", 10, "the claim")
    # The row is not locked by the task's transaction: the request does not wait for it.
    assert django_pgqueue.abort(running).changed == {int(running.id): "in_progress"}
    wait_for(lambda: Job.objects.get(pk=int(running.id)).status == "cancelled", 10, "the abort")
    wait_for(lambda: not worker._abandoned, 10, "the abandoned task to return")
    row = Job.objects.get(pk=int(running.id))
    assert (row.status, row.attempts, row.result) == ("cancelled", 1, None)
    assert not TaskRun.objects.exists()  # written before the abort, rolled back after it
