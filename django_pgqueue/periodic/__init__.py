"""Periodic (cron) tasks: declared in ``PGQUEUE["SCHEDULE"]`` or with ``@periodic``.

Each worker process runs a :class:`~django_pgqueue.periodic.scheduler.Scheduler`;
exactly one job is enqueued per tick, arbitrated by a unique row per
(schedule, tick instant). See docs/periodic.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .registry import periodic

__all__ = ["periodic"]


def __getattr__(name: str) -> Any:
    # Lazy, so that conf.py can import periodic.spec before the app registry is ready.
    if name == "periodic":
        from .registry import periodic

        return periodic
    raise AttributeError(f"module 'django_pgqueue.periodic' has no attribute {name!r}")
