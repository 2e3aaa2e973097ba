"""``@periodic``: periodic tasks declared in code, next to the task they run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import autodiscover_modules

from ..compat import Task
from ..conf import get_settings
from .spec import ArgumentLimits, ScheduleSpec, validate_entry

T = TypeVar("T", bound=Task)

#: Schedules declared with @periodic, by name (filled as modules import).
_declared: dict[str, ScheduleSpec] = {}


def periodic(
    cron: str,
    *,
    name: str | None = None,
    timezone: str = "UTC",
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    queue_name: str | None = None,
    catch_up: str | None = None,
) -> Callable[[T], T]:
    """Run the task below on a cron schedule, on top of ``@task``::

        @periodic(cron="*/5 * * * *")
        @task
        def refresh_rates() -> None: ...

    ``name`` defaults to the task's dotted path. Every worker process enqueues
    due ticks; exactly one job is enqueued per tick (docs/periodic.md). A bad
    cron expression or time zone raises ImproperlyConfigured at import.
    """

    def declare(task: T) -> T:
        if not isinstance(task, Task):
            raise ImproperlyConfigured(
                f"@periodic goes on top of @task (it got {task!r}): put @periodic(...) above @task."
            )
        spec_name = name or task.module_path
        entry: dict[str, Any] = {
            "task": task.module_path,
            "cron": cron,
            "timezone": timezone,
            "args": list(args),
            "kwargs": dict(kwargs or {}),
            "queue_name": queue_name,
            "catch_up": catch_up,
        }
        spec = validate_entry(
            spec_name,
            entry,
            f"@periodic on {task.module_path}",
            "decorator",
            ArgumentLimits.of(get_settings()),
        )
        _declared[spec_name] = spec
        return task

    return declare


def declared_schedules() -> dict[str, ScheduleSpec]:
    """Every schedule this process knows: ``PGQUEUE["SCHEDULE"]`` and ``@periodic``.

    Imports each installed app's ``tasks`` module first, so decorated tasks are
    found without the caller importing them. A name in both places is the
    settings' (the system check E021 reports the clash).
    """
    autodiscover_modules("tasks")
    return {**_declared, **get_settings().SCHEDULE}


def decorated_schedules() -> dict[str, ScheduleSpec]:
    """Schedules declared with @periodic (after importing the apps' ``tasks`` modules)."""
    autodiscover_modules("tasks")
    return dict(_declared)
