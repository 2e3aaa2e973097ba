"""``abort()`` of a running job reaches its worker at once (a NOTIFY), not at the next
lease extension a third of the lease later."""

from __future__ import annotations

import signal
import time

import pytest

import django_pgqueue
from django_pgqueue.models import Job
from testproject.demo import tasks

from ..conftest import job_status, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_abort_of_a_running_job_is_recorded_within_moments(worker_process):
    result = tasks.sleep_for.enqueue(30)
    # Lease 30 s: without the NOTIFY the worker would see the flag up to 10 s later.
    proc = worker_process("--concurrency", "1", "--lease", "30")
    wait_for(lambda: job_status(result.id) == "in_progress", 30, "the task to start", 0.05)
    time.sleep(0.5)  # past the lease keeper's start-up extension
    asked = time.monotonic()
    django_pgqueue.abort(result)
    wait_for(lambda: job_status(result.id) == "cancelled", 3, "the abort to be recorded", 0.02)
    assert time.monotonic() - asked < 3
    job = Job.objects.get(pk=int(result.id))
    assert "TaskAborted" in job.last_error
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0, proc.output()


def test_a_job_aborted_while_its_lease_lapsed_is_not_run_again(run_worker):
    from django.db.models.functions import Now

    from django_pgqueue import sql
    from django_pgqueue.db import connect
    from testproject.demo.models import TaskRun

    result = tasks.record_run.enqueue("aborted")
    params = {
        "all_queues": True,
        "queues": [],
        "limit": 1,
        "lease": 0.2,
        "worker_id": "gone",
        "floor": None,
    }
    with connect("test-claim") as conn:
        assert len(conn.execute(sql.CLAIM_JOBS, params).fetchall()) == 1
    django_pgqueue.abort(result)  # flagged: its worker is gone and never sees it
    lapsed = Job.objects.filter(pk=int(result.id), locked_until__lt=Now())
    wait_for(lapsed.exists, 5, "the lease to lapse (by the database clock)")
    run_worker(burst=True)  # its claim ends the row ``cancelled``
    job = Job.objects.get(pk=int(result.id))
    assert job.status == "cancelled" and "LeaseExpired" in job.last_error
    assert not TaskRun.objects.exists()
