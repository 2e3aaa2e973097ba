"""Model fields of our own.

``BigIntArrayField`` is a PostgreSQL ``bigint[]`` column read and written as a list
of ints. It is not ``django.contrib.postgres``'s ``ArrayField``: since Django 6.0
that field needs ``django.contrib.postgres`` in ``INSTALLED_APPS`` (check
``postgres.E005``), and a reusable app must not make its users add an app for a
column only its own SQL writes (the rollup's histograms).

``StoredJSONField`` is a ``JSONField`` that reads a value Python cannot decode as a
marker instead of raising: the job's columns and an event's payload, which rows
written past ``enqueue()`` and ``send_event()`` may fill.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

from ..stored_json import UndecodableJSON, reason


class BigIntArrayField(models.Field):
    """A ``bigint[]`` column as a list of ints (psycopg adapts lists to arrays)."""

    description = "Array of big integers"

    def db_type(self, connection: Any) -> str:
        return "bigint[]"

    def to_python(self, value: Any) -> list[int] | None:
        if value is None:
            return None
        try:
            return [int(v) for v in value]
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"expected a list of whole numbers, got {value!r}") from exc

    def get_prep_value(self, value: Any) -> list[int] | None:
        return self.to_python(value)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> list[int] | None:
        return None if value is None else list(value)


class StoredJSONField(models.JSONField):
    """A ``jsonb`` column that any writer may have filled: a value Python cannot
    decode (``stored_json.py``) reads as an :class:`UndecodableJSON` naming the
    problem, so the admin shows the row instead of failing with a
    ``RecursionError``, and such a marker is refused on save rather than written
    over what the row held."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        try:
            return super().from_db_value(value, expression, connection)
        except (ValueError, RecursionError) as exc:
            return UndecodableJSON.because(reason(exc))

    def get_prep_value(self, value: Any) -> Any:
        if isinstance(value, UndecodableJSON):
            raise ValueError(
                f"{self.name}: the row's stored JSON could not be decoded; it cannot be "
                "saved back (update the other columns with QuerySet.update())"
            )
        return super().get_prep_value(value)
