"""Task threads close the Django connections their tasks opened, and only those."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from django.db import connections
from django.utils import timezone

from django_pgqueue.jobs.rows import ClaimedJob
from django_pgqueue.worker import runner as runner_module
from django_pgqueue.worker.runner import TaskRunner
from testproject.demo import tasks


def claimed(task: Any, **kwargs: Any) -> ClaimedJob:
    now = timezone.now().timestamp()
    return ClaimedJob(
        1, "in_progress", uuid.uuid4(), 1, 3, task.module_path, [], kwargs,
        "default", 0, "default", now, now, now, [], ["w"], 0.0, False,
    )  # fmt: skip


def in_a_new_thread(runner: TaskRunner, jobs: list[ClaimedJob]) -> dict[str, Any]:
    """Run ``jobs`` in a fresh thread (a task thread's life); report what it saw."""
    seen: dict[str, Any] = {}

    def body() -> None:
        seen["outcomes"] = [runner.run(job).status for job in jobs]
        seen["open"] = connections["default"].connection is not None
        connections.close_all()

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    return seen


def test_a_task_that_used_the_orm_has_its_connection_closed_after_it(
    transactional_db, settings, monkeypatch
):
    assert settings.DATABASES["default"]["CONN_MAX_AGE"] == 0
    calls = []
    real = runner_module.close_old_connections
    monkeypatch.setattr(runner_module, "close_old_connections", lambda: calls.append(real()))

    seen = in_a_new_thread(
        TaskRunner("w", 60.0), [claimed(tasks.record_leased, label="orm"), claimed(tasks.noop)]
    )

    assert seen == {"outcomes": ["succeeded", "succeeded"], "open": False}
    # After the first task (which opened the thread's connection), before and after
    # the second (which did not, but the thread has one now).
    assert len(calls) >= 2


def test_tasks_that_never_open_a_connection_skip_the_check(transactional_db, monkeypatch):
    calls = []
    monkeypatch.setattr(runner_module, "close_old_connections", lambda: calls.append(1))

    seen = in_a_new_thread(TaskRunner("w", 60.0), [claimed(tasks.noop) for _ in range(3)])

    assert seen == {"outcomes": ["succeeded"] * 3, "open": False}
    assert calls == []
