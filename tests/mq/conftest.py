"""Fixtures of the message-queue tests: a clean options cache and no lingering LISTEN."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _fresh_mq_state() -> Iterator[None]:
    """Queues created by a rolled-back test must not survive in the options cache, and
    the wake-up listener's connection must be closed before the test database is dropped."""
    from django_pgqueue.mq import store
    from django_pgqueue.mq.wakeup import listener

    store._cache.clear()
    yield
    store._cache.clear()
    listener.close()


def table_rows(table: str) -> int:
    from django.db import connection
    from psycopg import sql as pgsql

    with connection.cursor() as cursor:
        cursor.execute(
            pgsql.SQL("SELECT count(*) FROM {}").format(pgsql.Identifier(table)).as_string(None)
        )
        return int(cursor.fetchone()[0])
