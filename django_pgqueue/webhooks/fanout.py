"""``send_event``: one Event and one Delivery per subscribed endpoint, in the caller's
transaction."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction

from .. import sql
from ..conf import get_settings
from ..exceptions import PayloadTooLarge
from ..notify import wake_workers
from ..routers import warn_if_outside_queue_transaction
from .breaker import max_attempts
from .signing import new_message_id

if TYPE_CHECKING:
    from ..models import Event


def serialize_payload(payload: Any) -> str:
    """The JSON text of a payload: compact, key order kept, strict (no NaN)."""
    if not isinstance(payload, Mapping):
        raise TypeError(
            f"A webhook payload must be a JSON object (a dict), got {type(payload).__name__}"
        )
    try:
        # ensure_ascii: the body is pure ASCII, so its bytes never depend on an encoding.
        return json.dumps(payload, separators=(",", ":"), allow_nan=False, ensure_ascii=True)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"The webhook payload cannot be sent as JSON: {exc}") from None


def send_event(
    event_type: str,
    payload: Mapping[str, Any],
    *,
    idempotency_key: str | None = None,
    ordering_key: str | None = None,
    using: str | None = None,
) -> Event:
    """Record an event and queue one delivery per active endpoint subscribed to its type.

    Runs in the caller's transaction: if it rolls back, nothing is sent. Workers are
    woken after the commit. With ``idempotency_key``, a second call with the same key
    returns the first Event and creates nothing (also across concurrent transactions).
    ``ordering_key`` (an order id, say) puts the event in that key's FIFO line on
    endpoints that order per key; elsewhere it is ignored.

    Raises ``TypeError``/``ValueError`` if the payload is not a JSON object that
    serialises, and ``PayloadTooLarge`` above ``PGQUEUE["WEBHOOKS"]["MAX_PAYLOAD_BYTES"]``;
    nothing is written then.
    """
    from ..models import Event

    if not isinstance(event_type, str) or not event_type.strip():
        raise ValueError(f"event_type must be a non-empty string, got {event_type!r}")
    if idempotency_key is not None and (
        not isinstance(idempotency_key, str) or not idempotency_key or len(idempotency_key) > 255
    ):
        raise ValueError("idempotency_key must be None or a string of 1 to 255 characters")
    if ordering_key is not None and (
        not isinstance(ordering_key, str) or not ordering_key or len(ordering_key) > 255
    ):
        raise ValueError("ordering_key must be None or a string of 1 to 255 characters")
    conf = get_settings()
    webhooks = conf.WEBHOOKS
    body = serialize_payload(payload)
    limit = webhooks["MAX_PAYLOAD_BYTES"]
    if len(body) > limit:
        raise PayloadTooLarge(
            f"The webhook payload is {len(body)} bytes as JSON; the limit is {limit} "
            "(PGQUEUE['WEBHOOKS']['MAX_PAYLOAD_BYTES']). Send an id the receiver can "
            "fetch the data with instead."
        )
    alias = using or conf.DATABASE
    msg_id = new_message_id()
    warn_if_outside_queue_transaction(alias, "send_event()", stacklevel=2)
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(sql.INSERT_EVENT, [event_type, body, body, msg_id, idempotency_key])
        row = cursor.fetchone()
        if row is None:
            # The key was used before (or by a transaction that just committed).
            return Event.objects.using(alias).get(idempotency_key=idempotency_key)
        event_id, created_at = row
        cursor.execute(
            sql.INSERT_DELIVERIES, [event_id, max_attempts(webhooks), ordering_key, event_type]
        )
        queued = cursor.rowcount
    event = Event(
        id=event_id,
        event_type=event_type,
        payload=json.loads(body),
        body=body,
        msg_id=msg_id,
        idempotency_key=idempotency_key,
        created_at=created_at,
    )
    event._state.adding = False
    event._state.db = alias
    if queued:
        wake_workers(alias)
    return event
