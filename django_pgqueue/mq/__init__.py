"""Message queues on the pgmq model: explicit send, read with a visibility timeout,
archive and delete, for everything that is not a Django task.

::

    from django_pgqueue import mq

    mq.create("emails")                       # mq.create("clicks", unlogged=True)
    mid = mq.send("emails", {"to": "a@example.com"}, delay=60)
    for msg in mq.read_with_poll("emails", vt=30, qty=5):
        ...
        mq.archive("emails", msg.msg_id)

Every call runs on Django's connection to the queue database and joins the
caller's transaction. See docs/message-queues.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async

from ..conf import get_settings
from . import sql as _sql
from .consumers import Consumer, consumer, consumers
from .exceptions import (
    ArchiveNotReady,
    InvalidMessage,
    InvalidQueueName,
    QueueError,
    QueueExists,
    QueueInUse,
    QueueNotFound,
)
from .grouped import (
    GROUP_HEADER,
    create_fifo_index,
    create_fifo_indexes_all,
    read_grouped,
    read_grouped_head,
    read_grouped_rr,
)
from .store import (
    Message,
    QueueInfo,
    QueueMetrics,
    archive,
    convert_archive_partitioned,
    create,
    delete,
    drop,
    get_queue,
    list_queues,
    metrics,
    metrics_all,
    move,
    pop,
    purge,
    read,
    send,
    send_batch,
    set_vt,
)
from .topics import (
    RoutingMatch,
    TopicBinding,
    bind_topic,
    list_topic_bindings,
    send_batch_topic,
    send_topic,
    test_routing,
    unbind_topic,
)
from .validation import MAX_POLL_SECONDS, MAX_QTY, MAX_VT_SECONDS, check_count, check_seconds

__all__ = [
    "GROUP_HEADER",
    "ArchiveNotReady",
    "Consumer",
    "InvalidMessage",
    "InvalidQueueName",
    "Message",
    "QueueError",
    "QueueExists",
    "QueueInUse",
    "QueueInfo",
    "QueueMetrics",
    "QueueNotFound",
    "RoutingMatch",
    "TopicBinding",
    "aarchive",
    "acreate",
    "adelete",
    "adrop",
    "alist_queues",
    "ametrics",
    "ametrics_all",
    "apop",
    "apurge",
    "archive",
    "aread",
    "aread_grouped",
    "aread_grouped_head",
    "aread_grouped_rr",
    "aread_with_poll",
    "asend",
    "asend_batch",
    "asend_topic",
    "aset_vt",
    "bind_topic",
    "consumer",
    "consumers",
    "convert_archive_partitioned",
    "create",
    "create_fifo_index",
    "create_fifo_indexes_all",
    "delete",
    "drop",
    "get_queue",
    "list_queues",
    "list_topic_bindings",
    "metrics",
    "metrics_all",
    "move",
    "pop",
    "purge",
    "read",
    "read_grouped",
    "read_grouped_head",
    "read_grouped_head_with_poll",
    "read_grouped_rr",
    "read_grouped_rr_with_poll",
    "read_grouped_with_poll",
    "read_with_poll",
    "send",
    "send_batch",
    "send_batch_topic",
    "send_topic",
    "set_vt",
    "test_routing",
    "unbind_topic",
]


def read_with_poll(
    name: str,
    vt: float = 30,
    qty: int = 1,
    *,
    max_poll_seconds: float = 5,
    poll_interval: float | None = None,
) -> list[Message]:
    """``read``, waiting up to ``max_poll_seconds`` for a message if none is visible.

    The wait ends as soon as a ``send`` to this queue commits (LISTEN/NOTIFY, see
    ``wakeup.py``); ``poll_interval`` (default ``PGQUEUE['POLL_INTERVAL']``) only
    bounds each sleep, for messages that become visible by time (a delay, a lapsed
    visibility timeout) and for lost notifications.
    """
    return _poll(read, name, vt, qty, max_poll_seconds, poll_interval)


def _with_poll(read: Callable[[str, float, int], list[Message]]) -> Callable[..., list[Message]]:
    """``read`` with ``read_with_poll``'s wait (a grouped read)."""

    def with_poll(
        name: str,
        vt: float = 30,
        qty: int = 1,
        *,
        max_poll_seconds: float = 5,
        poll_interval: float | None = None,
    ) -> list[Message]:
        return _poll(read, name, vt, qty, max_poll_seconds, poll_interval)

    with_poll.__name__ = f"{read.__name__}_with_poll"
    with_poll.__qualname__ = with_poll.__name__
    with_poll.__doc__ = f"``{read.__name__}``, waiting as ``read_with_poll`` does."
    return with_poll


read_grouped_with_poll = _with_poll(read_grouped)
read_grouped_rr_with_poll = _with_poll(read_grouped_rr)
read_grouped_head_with_poll = _with_poll(read_grouped_head)


def _poll(
    read: Callable[[str, float, int], list[Message]],
    name: str,
    vt: float,
    qty: int,
    max_poll_seconds: float,
    poll_interval: float | None,
) -> list[Message]:
    """Call ``read`` until it returns messages or ``max_poll_seconds`` have passed."""
    check_seconds("vt", vt, MAX_VT_SECONDS)
    check_count("qty", qty, MAX_QTY)
    check_seconds("max_poll_seconds", max_poll_seconds, MAX_POLL_SECONDS)
    conf = get_settings()
    interval = check_seconds(
        "poll_interval",
        conf.POLL_INTERVAL if poll_interval is None else poll_interval,
        60,
        minimum=0.001,
    )
    deadline = time.monotonic() + max_poll_seconds
    messages = read(name, vt, qty)
    if messages or max_poll_seconds <= 0:
        return messages
    if not conf.NOTIFY:
        while not messages and time.monotonic() < deadline:
            time.sleep(max(0.0, min(interval, deadline - time.monotonic())))
            messages = read(name, vt, qty)
        return messages
    from .wakeup import listener

    with listener.waiting(_sql.channel(name), deadline - time.monotonic()) as event:
        while True:
            # Registered before this read: a send committed after it sets the event.
            event.clear()
            messages = read(name, vt, qty)
            remaining = deadline - time.monotonic()
            if messages or remaining <= 0:
                return messages
            event.wait(min(interval, remaining))


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _async(func: Callable[_P, _R]) -> Callable[_P, Any]:
    """The coroutine version of ``func``, run like Django's async ORM calls."""
    wrapped = sync_to_async(func, thread_sensitive=True)
    wrapped.__doc__ = f"Async :func:`{func.__name__}`."
    return wrapped


acreate = _async(create)
adrop = _async(drop)
alist_queues = _async(list_queues)
asend = _async(send)
asend_batch = _async(send_batch)
aread = _async(read)
aread_with_poll = _async(read_with_poll)
aread_grouped = _async(read_grouped)
aread_grouped_rr = _async(read_grouped_rr)
aread_grouped_head = _async(read_grouped_head)
asend_topic = _async(send_topic)
apop = _async(pop)
aset_vt = _async(set_vt)
aarchive = _async(archive)
adelete = _async(delete)
apurge = _async(purge)
ametrics = _async(metrics)
ametrics_all = _async(metrics_all)
