"""What a periodic task is: a :class:`ScheduleSpec`, from settings or ``@periodic``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from ..contract import check_arguments, strict_text
from ..exceptions import ArgumentsNotJSON, PayloadTooLarge
from ..setting_keys import check_keys
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


@dataclass(frozen=True)
class ArgumentLimits:
    """The input contract's limits a schedule's arguments are checked against: the
    ones every enqueue is (``PGQUEUE["MAX_ARGS_BYTES"]`` and ``["MAX_JSON_DEPTH"]``)."""

    max_bytes: int
    max_depth: int

    @classmethod
    def of(cls, conf: Any) -> ArgumentLimits:
        """The limits of a configuration (``get_settings()``)."""
        return cls(conf.MAX_ARGS_BYTES, conf.MAX_JSON_DEPTH)


def _check_arguments(where: str, args: Any, kwargs: Any, limits: ArgumentLimits) -> tuple[str, str]:
    """Refuse arguments every tick's enqueue would refuse, at check time, with the
    enqueue's own rule (``contract.check_arguments``).

    The scheduler enqueues inside its own transaction: a NUL or a NaN found there
    would fail that tick on every pass, so the rule is applied where the schedule
    is declared, naming the entry.
    """
    try:
        return check_arguments(
            list(args),
            dict(kwargs),
            max_bytes=limits.max_bytes,
            max_depth=limits.max_depth,
            context="",
        )
    except (ArgumentsNotJSON, PayloadTooLarge) as exc:
        raise ImproperlyConfigured(f"{where}: {exc}") from exc


def _check_name(where: str, name: Any) -> None:
    if not isinstance(name, str) or not name or len(name) > 200:
        raise ImproperlyConfigured(
            f"{where}: schedule names must be non-empty strings of at most 200 characters, "
            f"got {name!r}"
        )
    strict_text(
        name,
        f"{where}: schedule names must be text PostgreSQL stores, but {name!r}",
        error=ImproperlyConfigured,
    )


def stored_arguments(spec: ScheduleSpec, limits: ArgumentLimits) -> tuple[str, str]:
    """A spec's arguments as the JSON its row stores, checked as at declaration.

    For specs that did not come through :func:`validate_entry` (built in code, or by
    another version): the same rule, raising ImproperlyConfigured naming the schedule.
    """
    where = f"Schedule {spec.name!r}"
    _check_name(where, spec.name)
    return _check_arguments(where, spec.args, spec.kwargs, limits)


def validate_entry(
    name: Any, entry: Any, where: str, origin: str, limits: ArgumentLimits
) -> ScheduleSpec:
    """One schedule entry as a ScheduleSpec, or ImproperlyConfigured naming the bad key.

    Everything a tick writes is checked here, so no tick can fail on its row or its
    job: the name, cron and time zone as text PostgreSQL stores, and the arguments
    under the input contract with ``limits``.
    """
    _check_name(where, name)
    if not isinstance(entry, Mapping):
        raise ImproperlyConfigured(f"{where} must be a dict, got {entry!r}")
    check_keys(where, entry, ENTRY_KEYS)
    for required in ("task", "cron"):
        if required not in entry:
            raise ImproperlyConfigured(f"{where} has no {required!r} key")
    task_path = entry["task"]
    if not isinstance(task_path, str) or "." not in task_path or len(task_path) > 255:
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
    _check_arguments(where, args, kwargs, limits)
    queue_name = entry.get("queue_name")
    if queue_name is not None:
        if not isinstance(queue_name, str) or not queue_name or len(queue_name) > 100:
            raise ImproperlyConfigured(
                f"{where}['queue_name'] must be a queue name, got {queue_name!r}"
            )
        strict_text(
            queue_name,
            f"{where}['queue_name'] must be a queue name, but {queue_name!r}",
            error=ImproperlyConfigured,
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


def validate_schedule(raw: Any, limits: ArgumentLimits) -> dict[str, ScheduleSpec]:
    """``PGQUEUE["SCHEDULE"]`` as specs by name (structure, cron, time zone and
    arguments checked)."""
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(f"PGQUEUE['SCHEDULE'] must be a dict, got {raw!r}")
    return {
        name: validate_entry(name, entry, f"PGQUEUE['SCHEDULE'][{name!r}]", "settings", limits)
        for name, entry in raw.items()
    }
