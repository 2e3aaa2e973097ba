"""Making a table disappear for the length of a block (then putting it back)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def table_away(name: str) -> Iterator[None]:
    """Rename ``name`` aside, so every statement that writes it fails, until the block
    ends: what a refused write of that table looks like to its callers."""
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE "{name}" RENAME TO "{name}_away"')
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER TABLE "{name}_away" RENAME TO "{name}"')
