"""An attempt the worker gave up reports nothing of its own afterwards.

The watchdog records a timed-out attempt (and replaces its thread); the task's
thread cannot be killed and may return later. Whatever it returns is discarded,
so it must not announce an outcome the queue never recorded.
"""

from __future__ import annotations

import pytest

from django_pgqueue.compat import TaskResultStatus, task_finished
from django_pgqueue.models import Job, Status
from testproject.demo import unruly

from ..conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _release_stuck_tasks():
    unruly.release.clear()
    yield
    unruly.release.set()


@pytest.fixture
def finished_signals():
    seen: list[tuple[str, str]] = []

    def receiver(sender, task_result, **kwargs):
        seen.append((task_result.id, task_result.status))

    task_finished.connect(receiver, dispatch_uid="test_abandoned_attempts")
    yield seen
    task_finished.disconnect(dispatch_uid="test_abandoned_attempts")


def test_a_timed_out_attempt_that_returns_later_sends_no_success(
    run_worker, settings, finished_signals
):
    settings.TASKS = {
        "default": {
            **settings.TASKS["default"],
            "OPTIONS": {"BACKOFF": "tests.worker.test_supervision.ten_minutes"},
        }
    }
    stuck = unruly.stuck.enqueue("late")
    worker = run_worker(burst=False, concurrency=1)
    wait_for(lambda: Job.objects.get(pk=int(stuck.id)).status == Status.FAILED, 10, "the timeout")
    unruly.release.set()  # the abandoned task returns, successfully, after its timeout
    wait_for(lambda: not worker._abandoned, 10, "the abandoned thread to end")
    row = Job.objects.get(pk=int(stuck.id))
    assert row.status == Status.FAILED and row.result is None
    assert (stuck.id, TaskResultStatus.SUCCESSFUL) not in finished_signals
