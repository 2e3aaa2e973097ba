"""What a periodic task is: a :class:`ScheduleSpec`, from settings or ``@periodic``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from . import cron

CATCH_UP_CHOICES = ("latest", "all", "none")

#: Keys of one ``PGQUEUE["SCHEDULE"]`` entry.
ENTRY_KEYS = ("task", "cron", "timezone", "args", "kwargs", "queue_name", "catch_up")


@dataclass(frozen=True)
class ScheduleSpec:
    """One periodic task as declared in code or settings."""

    name: str
    task_path: str
    cron: str
    timezone: str = "UTC"
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: None: the task's own queue.
    queue_name: str | None = None
    #: None: ``PGQUEUE["SCHEDULE_CATCH_UP"]``.
    catch_up: str | None = None
    origin: str = "settings"


def check_catch_up(where: str, value: Any) -> None:
    if value is not None and value not in CATCH_UP_CHOICES:
        raise ImproperlyConfigured(
            f"{where} must be one of {', '.join(map(repr, CATCH_UP_CHOICES))}, got {value!r}"
        )


def validate_entry(name: Any, entry: Any, where: str, origin: str) -> ScheduleSpec:
    """One schedule entry as a ScheduleSpec, or ImproperlyConfigured naming the bad key."""
    if not isinstance(name, str) or not name or len(name) > 200:
        raise ImproperlyConfigured(
            f"{where}: schedule names must be non-empty strings of at most 200 characters, "
            f"got {name!r}"
        )
    if not isinstance(entry, Mapping):
        raise ImproperlyConfigured(f"{where} must be a dict, got {entry!r}")
    unknown = sorted(set(entry) - set(ENTRY_KEYS))
    if unknown:
        raise ImproperlyConfigured(
            f"Unknown key(s) in {where}: {', '.join(unknown)}. Valid keys are: "
            f"{', '.join(ENTRY_KEYS)}."
        )
    for required in ("task", "cron"):
        if required not in entry:
            raise ImproperlyConfigured(f"{where} has no {required!r} key")
    task_path = entry["task"]
    if not isinstance(task_path, str) or "." not in task_path:
        raise ImproperlyConfigured(
            f"{where}['task'] must be the dotted path of a @task function, got {task_path!r}"
        )
    timezone = entry.get("timezone", "UTC")
    try:
        cron.validate(entry["cron"], timezone if isinstance(timezone, str) else "")
    except cron.BadCron as exc:
        key = "timezone" if "time zone" in str(exc) else "cron"
        raise ImproperlyConfigured(f"{where}[{key!r}]: {exc}") from exc
    args = entry.get("args", [])
    kwargs = entry.get("kwargs", {})
    if not isinstance(args, list | tuple):
        raise ImproperlyConfigured(f"{where}['args'] must be a list, got {args!r}")
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise ImproperlyConfigured(f"{where}['kwargs'] must be a dict with str keys")
    queue_name = entry.get("queue_name")
    if queue_name is not None and (not isinstance(queue_name, str) or not queue_name):
        raise ImproperlyConfigured(
            f"{where}['queue_name'] must be a queue name, got {queue_name!r}"
        )
    check_catch_up(f"{where}['catch_up']", entry.get("catch_up"))
    return ScheduleSpec(
        name=name,
        task_path=task_path,
        cron=entry["cron"],
        timezone=timezone,
        args=list(args),
        kwargs=dict(kwargs),
        queue_name=queue_name,
        catch_up=entry.get("catch_up"),
        origin=origin,
    )


def validate_schedule(raw: Any) -> dict[str, ScheduleSpec]:
    """``PGQUEUE["SCHEDULE"]`` as specs by name (structure, cron and time zone checked)."""
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(f"PGQUEUE['SCHEDULE'] must be a dict, got {raw!r}")
    return {
        name: validate_entry(name, entry, f"PGQUEUE['SCHEDULE'][{name!r}]", "settings")
        for name, entry in raw.items()
    }
