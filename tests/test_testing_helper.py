"""django_pgqueue.testing: the queue drained in-process, inside the test's transaction."""

from __future__ import annotations

import pytest
from django.test import TestCase, TransactionTestCase

from django_pgqueue.compat import TaskResultStatus
from django_pgqueue.models import Endpoint, Job
from django_pgqueue.testing import TooManyJobs, run_jobs, run_queued_jobs
from testproject.demo import tasks
from testproject.demo.models import TaskRun

from .support.receiver import Receiver


@pytest.mark.django_db  # one transaction, rolled back at the end (TestCase-style)
def test_jobs_run_inside_the_tests_transaction(pgqueue_jobs):
    added = tasks.add.enqueue(2, 3)
    flaky = tasks.flaky_charge.enqueue(7, fail_times=2)
    poison = tasks.always_fails.enqueue(1)
    recorded = tasks.record_run.enqueue(label="in-test")
    report = pgqueue_jobs()
    assert report.succeeded == 3 and report.failed == 4 and report.dead == 1
    assert tasks.add.get_result(added.id).return_value == 5
    charged = tasks.flaky_charge.get_result(flaky.id)
    assert charged.status == TaskResultStatus.SUCCESSFUL and charged.return_value["attempts"] == 3
    assert Job.objects.get(pk=int(poison.id)).status == "dead"
    assert TaskRun.objects.get(job_id=int(recorded.id)).label == "in-test"
    assert pgqueue_jobs().total == 0  # nothing left


@pytest.mark.django_db
def test_retries_can_be_left_waiting_and_deferred_jobs_wait():
    from datetime import timedelta

    from django.utils import timezone

    later = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 1)
    flaky = tasks.flaky_charge.enqueue(8, fail_times=1)
    report = run_queued_jobs(retries="wait")
    assert report.failed == 1 and report.succeeded == 0
    assert Job.objects.get(pk=int(flaky.id)).status == "failed"
    assert Job.objects.get(pk=int(later.id)).status == "pending"


@pytest.mark.django_db
def test_queues_are_selectable_and_a_runaway_is_stopped():
    tasks.add.enqueue(1, 1)
    tasks.send_receipt.enqueue(9)  # queue "emails"
    with run_jobs(queues=["emails"]) as report:
        pass
    assert report.succeeded == 1
    assert Job.objects.filter(status="pending").count() == 1
    for n in range(5):
        tasks.add.enqueue(n, n)
    with pytest.raises(TooManyJobs, match="ran 3 rows and more are due"):
        run_queued_jobs(max_jobs=3)


@pytest.mark.django_db
def test_webhook_deliveries_reach_a_test_receiver_when_asked():
    from django_pgqueue import send_event

    with Receiver() as receiver:
        Endpoint.objects.create(url=receiver.url("/hook"), event_types=[])
        with run_jobs(webhooks=True) as report:
            send_event("order.paid", {"order": 42})
        assert report.deliveries_succeeded == 1
        (request,) = receiver.hits("/hook")
    assert b'"data":{"order":42}' in request.body


@pytest.mark.django_db
def test_webhooks_are_not_sent_unless_asked():
    # A test that enqueues jobs must not POST to the real receivers its fixtures name.
    from django_pgqueue import send_event
    from django_pgqueue.models import Delivery

    with Receiver() as receiver:
        Endpoint.objects.create(url=receiver.url("/hook"), event_types=[])
        with run_jobs() as report:
            send_event("order.paid", {"order": 42})
            tasks.add.enqueue(1, 2)
        assert receiver.hits("/hook") == []
    assert report.succeeded == 1 and report.deliveries_succeeded == 0
    assert Delivery.objects.get().status == "pending"


@pytest.mark.django_db
def test_a_task_past_its_timeout_fails_as_under_a_worker():
    # The worker gives an attempt up at its timeout; the helper records the same outcome.
    result = tasks.overruns_its_timeout.enqueue(0.5)
    report = run_queued_jobs()
    assert (report.succeeded, report.failed, report.dead) == (0, 1, 1)
    row = Job.objects.get(pk=result.id)
    assert row.status == "dead" and row.result is None
    assert row.errors[-1]["exception_class_path"] == "django_pgqueue.exceptions.TaskTimeout"
    assert "within its timeout of 0.3 s" in row.errors[-1]["traceback"]
    assert tasks.overruns_its_timeout.enqueue(0.01) and run_queued_jobs().succeeded == 1


@pytest.mark.django_db
def test_a_cooperative_task_sees_its_deadline_and_is_told_to_stop(settings):
    from testproject.demo import unruly

    default = settings.TASKS["default"]
    settings.TASKS = {"default": {**default, "OPTIONS": {**default["OPTIONS"], "TIMEOUT": 0.3}}}
    unruly.cooperative.enqueue("polite")
    report = run_queued_jobs(retries="wait")
    assert report.failed == 1
    labels = set(TaskRun.objects.values_list("label", flat=True))
    assert "stopped:polite:deadline:True" in labels


class RunJobsInTestCase(TestCase):
    """Django's TestCase wraps each test in a transaction: in-process runs work there."""

    def test_effects_are_visible_and_rolled_back_with_the_test(self):
        with run_jobs() as report:
            result = tasks.record_run.enqueue(label="testcase")
        self.assertEqual(report.succeeded, 1)
        self.assertEqual(TaskRun.objects.get(job_id=int(result.id)).label, "testcase")


class RunJobsInTransactionTestCase(TransactionTestCase):
    """Where the code under test commits (on_commit hooks, other connections)."""

    def test_committed_jobs_run_too(self):
        result = tasks.add.enqueue(20, 22)  # autocommit: committed at once
        self.assertEqual(run_queued_jobs().succeeded, 1)
        self.assertEqual(tasks.add.get_result(result.id).return_value, 42)
