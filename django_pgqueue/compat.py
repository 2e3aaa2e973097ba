"""One place that knows where Django's Tasks framework lives.

Django 6.x ships it as ``django.tasks``; on Django 5.2 the ``django-tasks`` backport
provides the same API as ``django_tasks``. Everything else imports from here.
"""

from __future__ import annotations

try:
    from django.tasks import (
        DEFAULT_TASK_BACKEND_ALIAS,
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task,
        task_backends,
    )
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started

    TASKS_MODULE = "django.tasks"
except ImportError:  # Django 5.2: the backport.
    # mypy checks the package against django.tasks (django-stubs): the backport's classes
    # are the same API under other module names, hence the ignores on this branch.
    try:
        from django_tasks import (  # type: ignore[no-redef, assignment]
            DEFAULT_TASK_BACKEND_ALIAS,
            DEFAULT_TASK_QUEUE_NAME,
            TaskContext,
            TaskResult,
            TaskResultStatus,
            task,
            task_backends,
        )
        from django_tasks.backends.base import BaseTaskBackend  # type: ignore[assignment]
        from django_tasks.base import Task, TaskError  # type: ignore[assignment]
        from django_tasks.exceptions import (  # type: ignore[assignment]
            InvalidTaskError as InvalidTask,
        )
        from django_tasks.exceptions import TaskResultDoesNotExist  # type: ignore[assignment]
        from django_tasks.signals import (
            task_enqueued,
            task_finished,
            task_started,
        )
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "django_pgqueue needs Django's Tasks framework: use Django 6.0+ or install "
            "the backport on Django 5.2 (pip install 'django-pgqueue-engine[django52]')."
        ) from exc

    TASKS_MODULE = "django_tasks"

__all__ = [
    "DEFAULT_TASK_BACKEND_ALIAS",
    "DEFAULT_TASK_QUEUE_NAME",
    "TASKS_MODULE",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
