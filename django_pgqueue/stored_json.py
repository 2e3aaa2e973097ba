"""JSON read back from our own columns, which any writer may have filled.

``enqueue()``, ``send_event()`` and the other doors refuse what Python cannot read
back (``contract.py``), but a row written past them (by hand, by another program, by
an older release) can hold JSON that PostgreSQL stores and Python cannot decode:
nesting deeper than the recursion limit, an integer of more than 4300 digits, a
number beyond a float. :func:`decode` is the one place such text is read, so each
reader decides what one bad value costs (its own job, a marker in the admin, a named
error) instead of a ``RecursionError`` from deep inside ``json``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from .exceptions import StoredJSONNotDecodable


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text[:20]}... ({len(text)} characters) is too large for a float")
    return value


#: The one decoder of stored JSON (this module's readers and the message queues'
#: rows, ``mq/store.py``), built once: ``json.loads`` with options builds one per
#: call. A number too large for a float is refused rather than read as infinity,
#: which no door would store again.
DECODER = json.JSONDecoder(parse_float=_finite_float)


def decode(value: Any) -> Any:
    """``value`` as Python values: JSON text decoded (psycopg's loader aside, cursors
    hand ``jsonb`` back as text), anything else as it is. The empty list and object,
    most arguments and error logs, are answered without parsing.

    Raises :class:`StoredJSONNotDecodable` for text Python cannot read back.
    """
    if not isinstance(value, str):
        return value
    if value == "[]":
        return []
    if value == "{}":
        return {}
    try:
        return DECODER.decode(value)
    except (ValueError, RecursionError) as exc:
        raise StoredJSONNotDecodable(reason(exc)) from None


def reason(exc: BaseException) -> str:
    """Why ``json`` could not decode a value, in a line."""
    return f"{type(exc).__name__}: {str(exc)[:200]}"


class UndecodableJSON(str):
    """What a stored JSON value reads as, where a row is shown rather than acted on
    (the admin through :class:`~django_pgqueue.models.fields.StoredJSONField`, the
    HTTP API), when Python cannot decode it: text naming the problem. It is never
    written back."""

    @classmethod
    def because(cls, why: str) -> UndecodableJSON:
        return cls(f"(stored JSON Python cannot decode: {why})")


def readable(value: Any) -> Any:
    """:func:`decode`, or an :class:`UndecodableJSON` naming why not."""
    try:
        return decode(value)
    except StoredJSONNotDecodable as exc:
        return UndecodableJSON.because(str(exc))
