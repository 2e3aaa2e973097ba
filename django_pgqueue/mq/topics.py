"""Topic routing (pgmq 1.11+): bind patterns to queues, send once to every queue whose
pattern matches a routing key.

Routing keys are dot-separated segments (``orders.eu.created``); a pattern may use
``*`` for exactly one segment and ``#`` for any run of characters, dots included
(pgmq's compilation: ``orders.#`` matches ``orders.eu.created`` but not ``orders``).
The routing rule is one statement over one generated column (``sql.py``, migration
0023), run by this module and by the SQL API alike; the validation rules are one
list (``validation.py``) that both apply.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from . import sql
from .exceptions import QueueNotFound
from .store import _alias, _cursor, get_queue, send, send_batch
from .validation import (
    check_delay,
    check_headers,
    check_message,
    check_name,
    check_routing_key,
    check_topic_pattern,
)


@dataclass(frozen=True)
class TopicBinding:
    """One row of ``list_topic_bindings`` (pgmq's columns)."""

    pattern: str
    queue_name: str
    bound_at: dt.datetime
    compiled_regex: str


@dataclass(frozen=True)
class RoutingMatch:
    """One row of ``test_routing``: a pattern that matches, its queue, its regex."""

    pattern: str
    queue_name: str
    compiled_regex: str


def bind_topic(pattern: str, queue_name: str) -> None:
    """Deliver messages whose routing key matches ``pattern`` to ``queue_name``.

    Idempotent; a queue may have many patterns and a pattern many queues. ValueError
    for an invalid pattern, QueueNotFound for a queue that does not exist.
    """
    check_topic_pattern(pattern)
    get_queue(check_name(queue_name))
    try:
        with transaction.atomic(using=_alias()), _cursor() as cursor:
            cursor.execute(sql.topic_statement("bind"), [pattern, queue_name])
    except IntegrityError as exc:  # dropped since get_queue looked
        raise QueueNotFound(f"message queue {queue_name!r} does not exist") from exc


def unbind_topic(pattern: str, queue_name: str) -> bool:
    """Remove one binding; False if there was none."""
    check_topic_pattern(pattern)
    check_name(queue_name)
    with _cursor() as cursor:
        cursor.execute(sql.topic_statement("unbind"), [pattern, queue_name])
        return bool(cursor.fetchall())


def route(routing_key: str) -> list[str]:
    """The queues a message with ``routing_key`` goes to, by name (each once)."""
    check_routing_key(routing_key)
    with _cursor() as cursor:
        cursor.execute(sql.topic_statement("route"), [routing_key])
        return [row[0] for row in cursor.fetchall()]


def send_topic(
    routing_key: str,
    message: dict[str, Any] | list[Any],
    *,
    headers: dict[str, Any] | None = None,
    delay: float | dt.datetime = 0,
) -> int:
    """Send ``message`` to every queue bound to a pattern matching ``routing_key``, in one
    transaction (all the sends or none); returns how many queues it went to (0 when
    nothing matches: the message is not stored anywhere). Each send is ``mq.send``'s,
    with its rules and its wake-up; they are checked first, so bad input is refused
    even when no queue matches."""
    check_delay(delay)
    check_message(message)
    check_headers(headers)
    queues = route(routing_key)
    with transaction.atomic(using=_alias()):
        for queue in queues:
            send(queue, message, delay=delay, headers=headers)
    return len(queues)


def send_batch_topic(
    routing_key: str,
    messages: Iterable[dict[str, Any] | list[Any]],
    *,
    headers: Iterable[dict[str, Any] | None] | None = None,
    delay: float | dt.datetime = 0,
) -> list[tuple[str, int]]:
    """``send_batch`` to every matching queue, in one transaction; ``(queue_name,
    msg_id)`` of every message sent, queue by queue in name order."""
    check_delay(delay)
    batch = list(messages)
    heads = None if headers is None else list(headers)
    for n, message in enumerate(batch):
        check_message(message, f"messages[{n}]")
    for head in heads or ():
        check_headers(head)
    queues = route(routing_key)
    sent: list[tuple[str, int]] = []
    with transaction.atomic(using=_alias()):
        for queue in queues:
            ids = send_batch(queue, batch, delay=delay, headers=heads)
            sent.extend((queue, msg_id) for msg_id in ids)
    return sent


def test_routing(routing_key: str) -> list[RoutingMatch]:
    """The bindings a message with ``routing_key`` would match; sends nothing."""
    check_routing_key(routing_key)
    with _cursor() as cursor:
        cursor.execute(sql.topic_statement("test_routing"), [routing_key])
        return [RoutingMatch(*row) for row in cursor.fetchall()]


# Not a test for pytest to collect.
test_routing.__test__ = False  # type: ignore[attr-defined]


def list_topic_bindings(queue_name: str | None = None) -> list[TopicBinding]:
    """Every binding (or ``queue_name``'s), newest first."""
    if queue_name is not None:
        check_name(queue_name)
    with _cursor() as cursor:
        cursor.execute(sql.topic_statement("list"), [queue_name, queue_name])
        return [TopicBinding(*row) for row in cursor.fetchall()]
