"""``send_event``: one Event and one Delivery per subscribed endpoint, in the caller's
transaction.

This module checks what may be sent, before any SQL; the rows are written by the
webhook store's fan-out (``store.fan_out``), its only writer of events and deliveries.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction

from ..conf import get_settings
from ..contract import check_json_document
from ..exceptions import IdempotencyKeyConflict, PayloadNotJSON, UnknownApplication
from ..notify import WAKE_DELIVERIES, wake_workers
from ..routers import warn_if_outside_queue_transaction
from .breaker import max_attempts
from .catalogue import validate_event
from .routing import EVENT_TYPE_PATTERN, check_application_uid, check_channels, subscription_keys
from .signing import new_message_id
from .store import fan_out

if TYPE_CHECKING:
    from ..models import Application, Event

__all__ = ["EVENT_TYPE_PATTERN", "IDEMPOTENCY_KEY_PATTERN", "send_event"]


#: What an idempotency key may be: 1 to 255 visible ASCII characters (no spaces or
#: control characters), e.g. ``order-42-paid`` or a UUID.
IDEMPOTENCY_KEY_PATTERN = re.compile(r"[!-~]{1,255}")


def serialize_payload(payload: Any) -> str:
    """The JSON text of a payload: compact, key order kept, ASCII, checked (``contract.py``).

    Raises ``PayloadNotJSON`` (a TypeError and ValueError) naming the path of what
    cannot be stored, and ``PayloadTooLarge`` above ``MAX_PAYLOAD_BYTES``.
    """
    if not isinstance(payload, Mapping):
        raise PayloadNotJSON(
            f"A webhook payload must be a JSON object (a dict), got {type(payload).__name__}"
        )
    conf = get_settings()
    # ensure_ascii: the body is pure ASCII, so its bytes never depend on an encoding.
    return check_json_document(
        payload,
        name="payload",
        max_bytes=conf.WEBHOOKS["MAX_PAYLOAD_BYTES"],
        max_depth=conf.MAX_JSON_DEPTH,
        ensure_ascii=True,
        context="The webhook payload cannot be sent",
        error=PayloadNotJSON,
        limit_name="PGQUEUE['WEBHOOKS']['MAX_PAYLOAD_BYTES']",
    )


def check_event_type(event_type: Any) -> None:
    """Raise ValueError unless ``event_type`` follows ``EVENT_TYPE_PATTERN``."""
    if not isinstance(event_type, str) or not EVENT_TYPE_PATTERN.fullmatch(event_type):
        raise ValueError(
            f"event_type must be 1 to 255 characters: a letter or digit, then letters, "
            f"digits, '_', '.', ':', '/' or '-' (e.g. 'order.paid'), got {event_type!r}"
        )


def check_idempotency_key(key: Any, name: str = "idempotency_key") -> None:
    """Raise ValueError unless ``key`` is None or follows ``IDEMPOTENCY_KEY_PATTERN``
    (the rule of idempotency and ordering keys; ``name`` is the argument's)."""
    if key is not None and (not isinstance(key, str) or not IDEMPOTENCY_KEY_PATTERN.fullmatch(key)):
        raise ValueError(
            f"{name} must be None or 1 to 255 visible ASCII characters (no "
            f"spaces or control characters), got {key!r}"
        )


def send_event(
    event_type: str,
    payload: Mapping[str, Any],
    *,
    idempotency_key: str | None = None,
    ordering_key: str | None = None,
    application: str | Application | None = None,
    channels: list[str] | tuple[str, ...] | None = None,
    validate: bool | None = None,
    using: str | None = None,
) -> Event:
    """Record an event and queue one delivery per active endpoint subscribed to its type.

    Runs in the caller's transaction: if it rolls back, nothing is sent. Workers are
    woken after the commit. With ``idempotency_key``, a second call with the same key
    returns the first Event and creates nothing (also across concurrent transactions).
    ``ordering_key`` (an order id, say) puts the event in that key's FIFO line on
    endpoints that order per key; elsewhere it is ignored.

    ``application`` (an uid like ``"cust_42"``, or an ``Application``) sends the
    event to that application's endpoints only; without it, only global endpoints
    (no application) receive it (docs/multi-tenant.md). ``channels`` narrows it to
    the endpoints that subscribe to one of them, plus those without channels.
    ``UnknownApplication`` (a LookupError) when no active application has that uid.
    ``validate`` (default ``PGQUEUE["WEBHOOKS"]["VALIDATE_EVENT_TYPES"]``) checks the
    type and payload against the event type catalogue: ``EventSchemaError``.

    Everything is checked before any SQL (docs/webhooks.md, "What send_event
    accepts"): ``ValueError`` for an event type or idempotency key outside their
    rules, ``PayloadNotJSON`` (a TypeError and ValueError) for a payload that is not
    a JSON object storable as ``jsonb``, naming the path at fault, and
    ``PayloadTooLarge`` above ``PGQUEUE["WEBHOOKS"]["MAX_PAYLOAD_BYTES"]``. Nothing is
    written then, and the caller's transaction stays usable.
    """
    return record_event(
        event_type,
        payload,
        idempotency_key=idempotency_key,
        ordering_key=ordering_key,
        application=application,
        channels=channels,
        validate=validate,
        using=using,
    )[0]


def _one_statement_scope(alias: str) -> AbstractContextManager[Any]:
    """Where ``record_event``'s statement runs. The event, its deliveries and the
    application's lookup are one statement, atomic by itself: outside a transaction
    it runs on its own in autocommit (a ``BEGIN`` and a ``COMMIT`` around it would be
    two round trips more for nothing), and in the caller's transaction under a
    savepoint, so that a failure leaves that transaction usable."""
    conn = connections[alias]
    if conn.in_atomic_block or not conn.get_autocommit():
        return transaction.atomic(using=alias)
    return contextlib.nullcontext()


def record_event(
    event_type: str,
    payload: Mapping[str, Any],
    *,
    idempotency_key: str | None = None,
    ordering_key: str | None = None,
    application: str | Application | None = None,
    channels: list[str] | tuple[str, ...] | None = None,
    validate: bool | None = None,
    using: str | None = None,
) -> tuple[Event, int | None]:
    """``send_event``, also returning how many deliveries it queued: None when the
    idempotency key returned an earlier event (the HTTP API answers with both)."""
    from ..models import Event

    check_event_type(event_type)
    check_idempotency_key(idempotency_key)
    check_idempotency_key(ordering_key, "ordering_key")
    channel_list = check_channels(channels)
    uid: Any = getattr(application, "uid", application)
    if uid is not None:
        check_application_uid(uid)
    conf = get_settings()
    webhooks = conf.WEBHOOKS
    body = serialize_payload(payload)
    if webhooks["VALIDATE_EVENT_TYPES"] if validate is None else validate:
        validate_event(event_type, json.loads(body))
    alias = using or conf.DATABASE
    msg_id = new_message_id()
    warn_if_outside_queue_transaction(alias, "send_event()", stacklevel=3)
    with _one_statement_scope(alias):
        # The application's lookup, the event and its fan-out: one statement, the store's.
        application_id, active, event_id, created_at, queued = fan_out(
            alias,
            {
                "application": uid,
                "event_type": event_type,
                "body": body,
                "msg_id": msg_id,
                "idempotency_key": idempotency_key,
                "channels_json": json.dumps(channel_list),
                "ordering_key": ordering_key,
                "max_attempts": max_attempts(webhooks),
                "type_keys": subscription_keys(event_type),
                "channels": channel_list,
            },
            for_application=uid is not None,
        )
        if uid is not None and not active:
            # Nothing was written: the event is inserted only for an active application.
            state = "no application" if application_id is None else "the application is inactive"
            raise UnknownApplication(
                f"send_event(application={uid!r}): {state} with that uid; nothing was "
                f"sent. Create it (Application.objects.create(uid={uid!r})) or activate it."
            )
        if event_id is None:
            # The key was used before (or by a transaction that just committed).
            first = Event.objects.using(alias).get(idempotency_key=idempotency_key)
            if first.application_id != application_id:
                # Keys are unique across the installation: never hand one customer
                # another's event.
                raise IdempotencyKeyConflict(
                    f"idempotency_key {idempotency_key!r} was already used by an event of "
                    f"another application; nothing was sent. Prefix keys with the "
                    f"application's uid to keep them apart."
                )
            return first, None
    event = Event(
        id=event_id,
        application_id=application_id,
        channels=channel_list,
        event_type=event_type,
        payload=json.loads(body),
        body=body,
        msg_id=msg_id,
        idempotency_key=idempotency_key,
        ordering_key=ordering_key,
        created_at=created_at,
    )
    event._state.adding = False
    event._state.db = alias
    if queued:
        wake_workers(alias, payload=WAKE_DELIVERIES)
    return event, queued
