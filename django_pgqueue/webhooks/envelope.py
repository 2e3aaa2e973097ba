"""The body of a webhook request: ``{"type", "timestamp", "data"}``.

A receiver subscribed to ``order.*`` must be able to tell ``order.paid`` from
``order.refunded``, and the moment the event happened, from the signed bytes alone.
This is the payload shape the Standard Webhooks specification recommends (Svix sends
the same): the event type, an ISO-8601 UTC timestamp of when the event was created
(not when this attempt was sent: every retry carries the same body), and the payload
given to ``send_event`` as ``data``.

The envelope is built when the request is sent, from the event row's stored JSON
text, so the event store keeps the payload alone and the format lives here once. It
is not a header: a header is not covered by the signature, so a receiver dispatching
on it would trust bytes nobody signed.
"""

from __future__ import annotations

import datetime as dt
import json

#: JSON text of a string, ASCII only: the C encoder, made once (``json.dumps`` with
#: options builds a new encoder on every call).
_JSON_STRING = json.JSONEncoder(ensure_ascii=True).encode


def envelope_timestamp(occurred_at: dt.datetime) -> str:
    """The envelope's ``timestamp`` for an aware datetime: ``2026-12-02T06:10:00.123456Z``,
    UTC with a ``Z``, as the specification's examples."""
    if occurred_at.tzinfo is None or occurred_at.utcoffset():
        occurred_at = occurred_at.astimezone(dt.UTC)
    return f"{occurred_at.replace(tzinfo=None).isoformat(timespec='microseconds')}Z"


def envelope_text(event_type: str, occurred_at: dt.datetime, data: str) -> str:
    """The JSON text a receiver gets for one event.

    ``data`` is the event's stored payload, already compact ASCII JSON (fan-out wrote
    it so): it is spliced in unchanged rather than parsed and dumped again, so a large
    payload costs no parse per attempt and its bytes stay exactly as stored. The
    timestamp holds only digits and ``-:.TZ``, so it needs no escaping.
    """
    return (
        f'{{"type":{_JSON_STRING(event_type)},'
        f'"timestamp":"{envelope_timestamp(occurred_at)}","data":{data}}}'
    )


def envelope_body(event_type: str, occurred_at: dt.datetime, data: str) -> bytes:
    """The bytes sent (and signed) for one event: :func:`envelope_text`, UTF-8."""
    return envelope_text(event_type, occurred_at, data).encode()
