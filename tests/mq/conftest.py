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
    store._read_floors = store.ScanFloor()
    yield
    store._cache.clear()
    store._read_floors = store.ScanFloor()
    listener.close()
    _drop_queue_tables()


def _drop_queue_tables() -> None:
    """Drop the per-queue tables a transactional test left (the flush only empties the
    registry, which Django knows about; the queues' own tables are the API's)."""
    from psycopg import sql as pgsql

    from django_pgqueue.db import connect

    with connect("mq-test-cleanup", prepare=False) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT relname FROM pg_class WHERE relkind IN ('r', 'p') AND NOT relispartition"
                " AND relname ~ '^pgqueue_mq_[qa]_'"
                " AND relnamespace = current_schema()::regnamespace"
            )
        ]
        if tables:
            conn.execute(
                pgsql.SQL("DROP TABLE {}").format(
                    pgsql.SQL(", ").join(pgsql.Identifier(t) for t in tables)
                )
            )


@pytest.fixture
def sql_api() -> Iterator[str]:
    """The SQL API installed in schema pgmq_test for the test, removed after it."""
    from .test_sql_api import command

    command("--schema", "pgmq_test")
    yield "pgmq_test"
    command("--schema", "pgmq_test", "--uninstall")


def table_rows(table: str) -> int:
    from django.db import connection
    from psycopg import sql as pgsql

    with connection.cursor() as cursor:
        cursor.execute(
            pgsql.SQL("SELECT count(*) FROM {}").format(pgsql.Identifier(table)).as_string(None)
        )
        return int(cursor.fetchone()[0])
