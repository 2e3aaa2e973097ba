"""Atomic tasks: claim, body and completion in one transaction on the queue database."""

from __future__ import annotations

import pytest

from django_pgqueue.models import Job
from django_pgqueue.testing import run_queued_jobs
from testproject.demo import tasks
from testproject.demo.models import TaskRun

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


def test_failure_rolls_back_the_effect_and_records_the_attempt():
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


def test_the_transaction_is_bounded_by_the_timeout_setting(run_worker, settings):
    settings.PGQUEUE = {**settings.PGQUEUE, "ATOMIC_TIMEOUT_SECONDS": 0.5}
    result = tasks.record_atomic.enqueue(label="slow", sleep=1.5)
    run_queued_jobs(retries="wait")
    job = Job.objects.get(pk=int(result.id))
    # idle_in_transaction_session_timeout ended the session while the task slept.
    assert job.status == "failed" and job.attempts == 1
    assert not TaskRun.objects.exists()
    assert "terminat" in job.last_error.lower() or "connection" in job.last_error.lower()


def test_testing_helper_runs_atomic_jobs():
    tasks.record_atomic.enqueue(label="helper")
    report = run_queued_jobs()
    assert report.succeeded == 1
    assert TaskRun.objects.get().label == "helper"


def test_enqueue_many_writes_atomic_rows():
    from django_pgqueue import enqueue_many

    results = enqueue_many(tasks.record_atomic, [((), {"label": str(n)}) for n in range(3)])
    assert Job.objects.filter(pk__in=[int(r.id) for r in results], atomic=True).count() == 3
