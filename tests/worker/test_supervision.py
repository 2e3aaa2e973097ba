"""Supervised task threads: what a task raises, time limits, abort, and dead threads.

Every test checks that the worker kept its full thread count and that no row was
left ``in_progress`` (nothing lost).
"""

from __future__ import annotations

import datetime as dt
import signal
import uuid

import pytest
from django.utils import timezone

import django_pgqueue
from django_pgqueue import operations
from django_pgqueue.compat import task_started
from django_pgqueue.conf import get_settings
from django_pgqueue.models import Delivery, Job, Status
from django_pgqueue.worker.runner import TaskRunner
from django_pgqueue.worker.sources import JobSource
from testproject.demo import tasks, unruly
from testproject.demo.models import TaskRun

from ..conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def ten_minutes(exception, task_result):
    return 600


@pytest.fixture
def slow_retries(settings):
    """Retries ten minutes out, so a failed attempt stays visible as ``failed``."""
    settings.TASKS = {
        "default": {
            **settings.TASKS["default"],
            "OPTIONS": {"BACKOFF": "tests.worker.test_supervision.ten_minutes"},
        }
    }


@pytest.fixture(autouse=True)
def _release_stuck_tasks():
    unruly.release.clear()
    yield
    unruly.release.set()  # no thread of ours outlives the test


def threads_full(worker) -> bool:
    alive = [t for t in worker._threads if t.is_alive()]
    return len(alive) == worker.concurrency


def job(result) -> Job:
    return Job.objects.get(pk=int(result.id))


def nothing_held() -> bool:
    return not Job.objects.filter(status=Status.IN_PROGRESS).exists()


def test_whatever_a_task_raises_is_a_failed_attempt(run_worker, slow_retries):
    hostile = [
        (unruly.raise_system_exit.enqueue(), "builtins.SystemExit"),
        (unruly.raise_keyboard_interrupt.enqueue(), "builtins.KeyboardInterrupt"),
        (unruly.recurse_forever.enqueue(), "builtins.RecursionError"),
        (unruly.raise_unprintable.enqueue(), "testproject.demo.unruly.Unprintable"),
    ]
    innocent = [tasks.add.enqueue(i, 1) for i in range(6)]
    worker = run_worker(concurrency=2)
    for result, path in hostile:
        row = job(result)
        assert row.status == Status.FAILED, (path, row.status, row.last_error)
        assert row.errors[-1]["exception_class_path"] == path
        assert row.locked_until is None
    assert job(hostile[3][0]).last_error == "Unprintable: <message could not be rendered>"
    assert [job(r).result for r in innocent] == [i + 1 for i in range(6)]
    assert worker.replaced == 0 and worker.finished == 10
    assert nothing_held()


def test_an_exception_escaping_the_runner_is_recorded(run_worker, slow_retries):
    # A task_started receiver runs in the runner, outside the task's own try.
    def broken_receiver(sender, **kwargs):
        raise OverflowError("receiver failed")

    task_started.connect(broken_receiver)
    try:
        results = [tasks.add.enqueue(i, 1) for i in range(4)]
        worker = run_worker(concurrency=2)
    finally:
        task_started.disconnect(broken_receiver)
    for result in results:
        row = job(result)
        assert row.status == Status.FAILED
        assert row.errors[-1]["exception_class_path"] == "builtins.OverflowError"
        assert row.last_error == "OverflowError: receiver failed"
    assert worker.replaced == 0
    assert nothing_held()


def test_timeout_fails_the_attempt_and_frees_its_thread(run_worker, slow_retries):
    stuck = unruly.stuck.enqueue("overrun")
    after = tasks.add.enqueue(2, 3)
    worker = run_worker(burst=False, concurrency=1, lease_seconds=3)
    # One task thread: the next job runs only because the stuck one was replaced.
    wait_for(lambda: job(after).status == Status.SUCCEEDED, 15, "the job behind the stuck one")
    row = job(stuck)
    assert row.status == Status.FAILED and row.attempts == 1
    assert row.locked_until is None
    assert row.next_attempt_at > timezone.now() + dt.timedelta(minutes=9)  # its backoff
    error = row.errors[-1]
    assert error["exception_class_path"] == "django_pgqueue.exceptions.TaskTimeout"
    assert "within its timeout of 0.5 s" in error["traceback"]
    assert "release.wait(60)" in error["traceback"]  # where the task was
    assert worker.replaced == 1 and threads_full(worker)

    # The abandoned thread's task returns later: its result is discarded.
    unruly.release.set()
    wait_for(lambda: not worker._abandoned, 10, "the abandoned thread to end")
    row.refresh_from_db()
    assert row.status == Status.FAILED and row.result is None
    assert TaskRun.objects.filter(label="overrun").count() == 1
    assert threads_full(worker) and nothing_held()


def test_backend_timeout_and_cooperative_stop(run_worker, settings, slow_retries):
    default = settings.TASKS["default"]
    settings.TASKS = {"default": {**default, "OPTIONS": {**default["OPTIONS"], "TIMEOUT": 0.5}}}
    result = unruly.cooperative.enqueue("polite")
    worker = run_worker(concurrency=1)
    wait_for(
        lambda: TaskRun.objects.filter(label__startswith="stopped:polite").first(),
        10,
        "the task to notice its deadline",
    )
    assert TaskRun.objects.get(label__startswith="stopped:").label == "stopped:polite:deadline:True"
    row = job(result)
    assert row.status == Status.FAILED
    assert row.errors[-1]["exception_class_path"].endswith("TaskTimeout")
    assert row.result is None  # its return value came after the attempt was given up
    assert worker.replaced == 1


def test_abort_a_running_job(run_worker):
    result = unruly.cooperative.enqueue("busy")
    other = tasks.add.enqueue(1, 1)
    worker = run_worker(burst=False, concurrency=1, lease_seconds=1.5)
    wait_for(lambda: TaskRun.objects.filter(label="start:busy").exists(), 10, "the task to start")

    outcome = django_pgqueue.abort(result)
    assert outcome.changed == {int(result.id): Status.IN_PROGRESS}
    assert job(result).abort_requested_at is not None

    wait_for(lambda: job(result).status == Status.CANCELLED, 10, "the attempt to be cancelled")
    row = job(result)
    assert row.finished_at is not None and row.locked_until is None
    assert row.errors[-1]["exception_class_path"] == "django_pgqueue.exceptions.TaskAborted"
    assert "aborted by an operator while it was running" in row.last_error
    wait_for(lambda: job(other).status == Status.SUCCEEDED, 10, "the next job")
    wait_for(
        lambda: TaskRun.objects.filter(label="stopped:busy:no deadline:True").exists(),
        10,
        "the task to see the abort",
    )
    assert worker.replaced == 1 and threads_full(worker)
    assert nothing_held()


def test_abort_of_a_claimed_job_waiting_for_a_thread_cancels_it_unrun(run_worker):
    busy = unruly.cooperative.enqueue("first")
    waiting = tasks.add.enqueue(1, 1)
    worker = run_worker(burst=False, concurrency=1, prefetch=1, lease_seconds=1.5)
    wait_for(lambda: TaskRun.objects.filter(label="start:first").exists(), 10, "the first task")
    assert job(waiting).status == Status.IN_PROGRESS  # claimed, waiting for the thread
    django_pgqueue.abort(waiting)
    wait_for(lambda: ("jobs", int(waiting.id)) in worker._aborts, 10, "the worker to see it")
    django_pgqueue.abort(busy)
    wait_for(lambda: job(waiting).status == Status.CANCELLED, 10, "the waiting job to be cancelled")
    row = job(waiting)
    assert row.result is None and "before it started" in row.last_error
    wait_for(lambda: job(busy).status == Status.CANCELLED, 10, "the running job to be cancelled")
    assert threads_full(worker) and nothing_held()


def test_abort_a_pending_job_cancels_it_and_replay_runs_it_again(run_worker):
    result = tasks.add.enqueue(20, 22)
    outcome = django_pgqueue.abort(result.id)
    assert outcome.changed == {int(result.id): Status.PENDING}
    row = job(result)
    assert row.status == Status.CANCELLED and row.finished_at is not None
    assert operations.abort(Job, [row.pk]).skipped == {row.pk: "is cancelled"}

    operations.replay(Job, [row.pk])
    assert job(result).abort_requested_at is None
    run_worker()
    assert job(result).result == 42


def test_only_jobs_can_be_aborted():
    with pytest.raises(ValueError, match="only jobs"):
        operations.abort(Delivery, [1])


def test_an_aborted_row_whose_worker_died_is_cancelled_not_rerun(run_worker):
    result = tasks.add.enqueue(1, 2)
    # As a worker that died holding it would leave it: in progress, lease lapsed.
    Job.objects.filter(pk=int(result.id)).update(
        status=Status.IN_PROGRESS,
        attempts=1,
        locked_by=uuid.uuid4(),
        locked_until=timezone.now() - dt.timedelta(seconds=1),
    )
    operations.abort(Job, [int(result.id)])
    run_worker()
    row = job(result)
    assert row.status == Status.CANCELLED and row.result is None and row.finished_at


class DiesOnce(JobSource):
    """Our own code failing twice for one row: its run raises, and so does the
    description of that failure, so the exception kills the task thread."""

    def __init__(self, runner: TaskRunner, victim: int) -> None:
        super().__init__(runner)
        self.victim = victim
        self.failed = False

    def run(self, item):
        if item.id == self.victim and not self.failed:
            self.failed = True
            raise MemoryError("simulated")
        return super().run(item)

    def crashed(self, item, exc):
        if item.id == self.victim:
            raise MemoryError("describing the failure failed too")
        return super().crashed(item, exc)


def test_a_dead_thread_is_replaced_and_its_row_comes_back_through_the_lease(run_worker):
    victim = tasks.add.enqueue(3, 4)
    others = [tasks.add.enqueue(i, 0) for i in range(4)]
    worker_id = f"dies-{uuid.uuid4().hex[:6]}"
    source = DiesOnce(TaskRunner(worker_id, get_settings().UNKNOWN_TASK_DELAY), int(victim.id))
    worker = run_worker(
        burst=False, concurrency=2, lease_seconds=1.5, worker_id=worker_id, sources=[source]
    )
    wait_for(lambda: worker.replaced >= 1, 10, "a replacement thread")
    assert [job(r).result for r in others] == [0, 1, 2, 3]
    # Its lease was not extended: it lapsed, and the row ran again.
    wait_for(lambda: job(victim).status == Status.SUCCEEDED, 20, "the row to come back")
    row = job(victim)
    assert row.result == 7 and row.attempts == 2
    assert row.errors[-1]["exception_class_path"] == "django_pgqueue.exceptions.LeaseExpired"
    assert threads_full(worker) and nothing_held()


def test_timeout_option_is_validated(settings):
    from django.core.checks import run_checks

    settings.TASKS = {
        "default": {**settings.TASKS["default"], "OPTIONS": {"TIMEOUT": -1}},
    }
    messages = [m.msg for m in run_checks() if m.id == "django_pgqueue.E010"]
    assert any("['TIMEOUT'] must be a positive number" in m for m in messages), messages
    from django_pgqueue.compat import InvalidTask, task

    with pytest.raises(InvalidTask, match="timeout must be a positive number"):
        task(timeout="soon")(tasks.add.func)


def test_a_child_keeping_an_overdue_thread_is_drained_and_replaced(worker_process):
    # One attempt: a retry would leave a second child with a stuck thread, which then
    # exits 75 if the SIGTERM below finds it still draining.
    stuck = unruly.stuck_once.enqueue("forever")  # never released in the child
    proc = worker_process(
        "--processes",
        "2",
        "--concurrency",
        "1",
        env={"PGQUEUE_SHUTDOWN_GRACE_SECONDS": "1", "PGQUEUE_LOG_LEVEL": "INFO"},
    )
    # Timed out at 0.5 s; still running 1 s later (the grace): the child drains and
    # exits, and the supervisor starts a fresh one at once.
    wait_for(lambda: "drained to shed a stuck task thread" in proc.output(), 30, "the recycle", 0.1)
    first = job(stuck).errors[0]
    assert first["exception_class_path"] == "django_pgqueue.exceptions.TaskTimeout"
    after = tasks.add.enqueue(5, 5)
    wait_for(lambda: job(after).status == Status.SUCCEEDED, 30, "the fresh child to run work")
    proc.signal(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()
    assert job(stuck).status != Status.IN_PROGRESS
