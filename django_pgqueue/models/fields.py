"""Model fields of our own.

``BigIntArrayField`` is a PostgreSQL ``bigint[]`` column read and written as a list
of ints. It is not ``django.contrib.postgres``'s ``ArrayField``: since Django 6.0
that field needs ``django.contrib.postgres`` in ``INSTALLED_APPS`` (check
``postgres.E005``), and a reusable app must not make its users add an app for a
column only its own SQL writes (the rollup's histograms).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import models


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
