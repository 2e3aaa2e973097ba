"""``@mq.consumer(...)``: message handlers that ``runworkers`` runs.

A consumer is a function of one :class:`~django_pgqueue.mq.Message`. Workers read
its queue with the visibility timeout as the lease (extended while the handler
runs), run the handler on their task threads, and archive (or delete) each
message whose handler returned. A handler that raises leaves its message to
reappear after the timeout; with the queue's ``max_reads`` it ends up as a dead
letter. See ``source.py`` for the worker side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .validation import MAX_QTY, MAX_VT_SECONDS, check_count, check_name, check_seconds

Handler = Callable[[Any], Any]


@dataclass(frozen=True)
class Consumer:
    """A registered handler and how to read its queue."""

    queue: str
    handler: Handler
    vt: float
    batch: int
    delete: bool
    time_limit: float | None

    @property
    def path(self) -> str:
        return f"{self.handler.__module__}.{self.handler.__qualname__}"


_registry: dict[str, Consumer] = {}


def consumer(
    queue: str,
    *,
    vt: float = 30,
    batch: int = 10,
    delete: bool = False,
    time_limit: float | None = None,
) -> Callable[[Handler], Handler]:
    """Register the decorated function as the consumer of ``queue``.

    ``vt`` is the visibility timeout of each read (the lease, extended while the
    handler runs), ``batch`` the most messages read at once, ``delete=True``
    deletes handled messages instead of archiving them, and ``time_limit``
    (seconds) makes a handler that runs longer stop holding its message: the lease
    is no longer extended, so the message reappears for another attempt.
    One consumer per queue in a process.
    """
    check_name(queue)
    check_seconds("vt", vt, MAX_VT_SECONDS, minimum=1)
    check_count("batch", batch, MAX_QTY)
    if time_limit is not None:
        check_seconds("time_limit", time_limit, MAX_VT_SECONDS, minimum=0.001)

    def register(func: Handler) -> Handler:
        existing = _registry.get(queue)
        entry = Consumer(queue, func, float(vt), batch, delete, time_limit)
        if existing is not None and existing.path != entry.path:
            raise ValueError(
                f"queue {queue!r} already has a consumer, {existing.path}; one per queue"
            )
        _registry[queue] = entry
        return func

    return register


def consumers() -> dict[str, Consumer]:
    """Registered consumers by queue name (import their modules first)."""
    return dict(_registry)


def unregister(queue: str) -> None:
    """Forget the consumer of ``queue`` (tests)."""
    _registry.pop(queue, None)
