"""django_pgqueue: PostgreSQL as a durable job queue and webhook engine for Django.

Public API (lazily imported, so ``import django_pgqueue`` works before Django is set up):

* :func:`task` -- ``@task(max_attempts=..., backoff=...)`` on every supported Django.
* :func:`enqueue_many` -- many jobs of one task in one statement.
* :func:`abort` -- stop a job: cancel it, or end its running attempt as cancelled.
* :func:`current_attempt` -- in a task: its deadline and whether it was aborted.
* :mod:`django_pgqueue.operations` -- replay / retry_now / cancel / move_to_dlq / abort,
  and the webhook endpoint operations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .__about__ import __version__

if TYPE_CHECKING:
    from .backend import enqueue_many
    from .compat import task
    from .operations import abort_job as abort
    from .worker.attempt import current_attempt

__all__ = ["__version__", "abort", "current_attempt", "enqueue_many", "task"]


def __getattr__(name: str) -> Any:
    if name == "enqueue_many":
        from .backend import enqueue_many

        return enqueue_many
    if name == "abort":
        from .operations import abort_job

        return abort_job
    if name == "current_attempt":
        from .worker.attempt import current_attempt

        return current_attempt
    if name == "task":
        from .compat import task

        return task
    if name == "send_event":
        from .webhooks.fanout import send_event

        return send_event
    raise AttributeError(f"module 'django_pgqueue' has no attribute {name!r}")
