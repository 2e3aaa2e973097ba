"""One place that knows where Django's Tasks framework lives.

Django 6.x ships it as ``django.tasks``; on Django 5.2 the ``django-tasks`` backport
provides the same API as ``django_tasks``. Everything else imports from here.

``task`` is the one decorator to use on every supported Django (``from django_pgqueue
import task``): Django 6.1 and the backport pass options such as ``max_attempts`` through
to the backend's task class, and there it *is* the framework's decorator; Django 6.0's
takes no options (``@task(max_attempts=3)`` raises ``TypeError``), and there it is a
decorator of the same shape that passes them through.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

try:
    from django.tasks import (
        DEFAULT_TASK_BACKEND_ALIAS,
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task_backends,
    )
    from django.tasks import task as framework_task
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started

    TASKS_MODULE = "django.tasks"
except ImportError:  # Django 5.2: the backport.
    # mypy checks the package against django.tasks (django-stubs): the backport's classes
    # are the same API under other module names, hence the ignores on this branch.
    try:
        from django_tasks import (  # type: ignore[assignment]
            DEFAULT_TASK_BACKEND_ALIAS,
            DEFAULT_TASK_QUEUE_NAME,
            TaskContext,
            TaskResult,
            TaskResultStatus,
            task_backends,
        )
        from django_tasks import task as framework_task  # type: ignore[no-redef]
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


def passes_options(decorator: Callable[..., Any]) -> bool:
    """Whether a ``@task`` decorator hands extra keyword options to the task class."""
    parameters = inspect.signature(decorator).parameters.values()
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def task_with_options(
    function: Callable[..., Any] | None = None,
    *,
    priority: int = 0,
    queue_name: str = DEFAULT_TASK_QUEUE_NAME,
    backend: str = DEFAULT_TASK_BACKEND_ALIAS,
    takes_context: bool = False,
    **options: Any,
) -> Any:
    """Django 6.1's ``@task`` for a framework whose decorator takes no options.

    ``options`` (``max_attempts``, ``backoff``, ``timeout``...) go to the backend's
    ``task_class``, which validates them, exactly as Django 6.1 does.
    """
    if "run_after" in options:
        raise TypeError(
            "run_after cannot be defined statically with the @task decorator. "
            "Use .using(run_after=...) to set it dynamically."
        )

    def wrapper(func: Callable[..., Any]) -> Task:
        task_class: Any = task_backends[backend].task_class
        return task_class(
            priority=priority,
            func=func,
            queue_name=queue_name,
            backend=backend,
            takes_context=takes_context,
            run_after=None,
            **options,
        )

    if function is not None:
        return wrapper(function)
    return wrapper


#: ``@task``, with backend options on every supported Django (see the module docstring).
task: Callable[..., Any] = framework_task if passes_options(framework_task) else task_with_options

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
    "framework_task",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
