"""psycopg connections of our own (worker, listener, notifier), built from Django's settings.

The worker does not use Django's connections for queue bookkeeping: its claim,
completion and lease statements run in autocommit on dedicated psycopg
connections, with prepared statements where allowed. Task code still uses
Django's per-thread connections as usual.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from django.db import connections
from psycopg.types.json import JsonbLoader

from .conf import get_settings

# Keepalives make a half-open TCP connection fail within about a minute instead
# of hanging until the kernel gives up (hours). tcp_user_timeout bounds a send
# that is never acknowledged.
KEEPALIVE_PARAMS = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30000,
}


class FastJsonbLoader(JsonbLoader):
    """``jsonb`` loader that answers the empty list and object without parsing.

    A claimed job returns four ``jsonb`` columns, most of them ``[]`` or ``{}``
    (no arguments, no errors yet); skipping ``json.loads`` for those takes a
    visible share of the claim loop's time off a drain of short tasks.
    """

    def load(self, data: Any) -> Any:
        if len(data) == 2:
            if data == b"[]":
                return []
            if data == b"{}":
                return {}
        return json.loads(data if isinstance(data, bytes) else bytes(data))


def connection_params(alias: str | None = None) -> dict[str, Any]:
    """libpq parameters of the Django database ``alias`` (the queue database by default)."""
    alias = alias or get_settings().DATABASE
    params = dict(connections[alias].get_connection_params())
    # Django's cursor classes, adapters context and pool belong to Django's own
    # connections; ours are plain psycopg connections.
    for key in ("cursor_factory", "context", "pool", "server_side_binding", "prepare_threshold"):
        params.pop(key, None)
    host = params.get("host") or ""
    if not host.startswith("/"):
        params = {**KEEPALIVE_PARAMS, **params}
    return params


def connect(
    purpose: str, *, alias: str | None = None, dsn: str | None = None, prepare: bool | None = None
) -> psycopg.Connection:
    """Open an autocommit connection named ``pgqueue-<purpose>`` in ``pg_stat_activity``.

    The name lets operators (and fault tests) find the worker's, listener's and
    notifier's sessions. ``dsn`` overrides Django's settings (``LISTEN_DSN``).
    """
    conf = get_settings()
    if prepare is None:
        prepare = conf.PREPARED_STATEMENTS
    name = f"pgqueue-{purpose}"[:63]
    if dsn:
        conn = psycopg.connect(dsn, autocommit=True, application_name=name, connect_timeout=10)
    else:
        params = connection_params(alias)
        params.setdefault("connect_timeout", 10)
        conn = psycopg.connect(autocommit=True, application_name=name, **params)
    # psycopg prepares a statement after it ran prepare_threshold times; None
    # disables it (needed behind PgBouncer < 1.21 in transaction mode).
    conn.prepare_threshold = 2 if prepare else None
    conn.adapters.register_loader("jsonb", FastJsonbLoader)
    return conn


def is_connection_error(exc: BaseException) -> bool:
    """True for errors after which the connection must be replaced (not a SQL bug)."""
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return True
    sqlstate = getattr(exc, "sqlstate", None) or ""
    # 08: connection exception; 57P: operator intervention (admin shutdown,
    # pg_terminate_backend, crash recovery); 25006: read-only transaction after a
    # failover to a standby.
    return sqlstate.startswith(("08", "57P")) or sqlstate == "25006"


def is_data_error(exc: BaseException) -> bool:
    """True when the statement failed on a value it carried, not on the connection.

    22: data exception (NUL in text, ``\\u0000`` in jsonb, a value out of range); 23:
    a constraint refused a row; 54: a program limit (a document too deep for the
    server's stack, checked before 08/57P because psycopg files it under
    OperationalError). A ``UnicodeEncodeError`` is psycopg refusing to send a lone
    surrogate. The same statement would fail the same way if sent again.
    """
    if isinstance(exc, UnicodeError | psycopg.DataError | psycopg.IntegrityError):
        return True
    sqlstate = getattr(exc, "sqlstate", None) or ""
    return sqlstate.startswith(("22", "23", "54"))


def describe_db_error(exc: BaseException) -> str:
    """``ClassName: message (detail)`` on one line, without the statement's parameters."""
    diag = getattr(exc, "diag", None)
    message = getattr(diag, "message_primary", None) or (str(exc).splitlines() or [""])[0]
    detail = getattr(diag, "message_detail", None)
    return f"{type(exc).__name__}: {message}" + (f" ({detail})" if detail else "")


_NAMED_PARAMETER = re.compile(r"%\((\w+)\)s")


class PositionalStatement:
    """A ``%(name)s`` statement converted once to PostgreSQL's ``$n`` form.

    psycopg converts a statement with named parameters on every execution and caches
    the result only for statements up to 4 KiB, so a longer one (the delivery claim and
    completion) paid a full parse of its text on every run. A raw cursor sends the
    converted text as is (and psycopg still prepares it server-side after its second
    run, with the connection's prepare threshold).
    """

    def __init__(self, query: str) -> None:
        names: list[str] = []

        def number(match: re.Match[str]) -> str:
            if match.group(1) not in names:
                names.append(match.group(1))
            return f"${names.index(match.group(1)) + 1}"

        self.query = _NAMED_PARAMETER.sub(number, query)
        if "%" in self.query:
            raise ValueError("only %(name)s placeholders can be converted")
        self.names = tuple(names)

    def fetchall(self, conn: Any, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        with psycopg.RawCursor(conn) as cursor:
            cursor.execute(self.query, [params[name] for name in self.names])
            return cursor.fetchall()


def array_literal(items: list[str]) -> str:
    """``{a,b,c}`` for elements that need no quoting (numbers, uuids, state names).

    Batch statements take their arrays as literals (text, cast by the statement):
    psycopg's generic list dumper adapts element by element, which took the largest
    share of the completer's time in a drain of short tasks.
    """
    return "{" + ",".join(items) + "}"


def text_array_literal(items: list[str | None]) -> str:
    """A ``text[]`` literal: every element double-quoted with ``\\`` and ``"`` escaped,
    ``None`` as an unquoted NULL."""
    return (
        "{"
        + ",".join(
            "NULL" if item is None else '"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"'
            for item in items
        )
        + "}"
    )


#: A prepare threshold no statement reaches during one ``execute_one`` call:
#: only the statement executed with ``prepare=True`` is prepared.
_ONLY_WHEN_ASKED = 2**31


def execute_one(
    connection: Any, statement: str, params: Sequence[Any] | Mapping[str, Any], *, prepare: bool
) -> Any:
    """Run ``statement`` on Django's ``connection`` and return its first row.

    Django's psycopg cursors bind parameters on the client, so PostgreSQL parses
    and plans the statement again on every call; for a one-row enqueue that is a
    large share of the whole cost. This runs it on the same psycopg connection
    with server-side binding, so the caller's transaction, ``on_commit`` hooks and
    Django's error wrapping apply as before. When Django records queries
    (``DEBUG``, ``assertNumQueries``) or an ``execute_wrapper`` is installed
    (tracing, query inspection), the ordinary cursor is used so they see it.

    With ``prepare`` the statement is a server-side prepared statement. Django
    opens its connections with ``prepare_threshold=None`` unless ``OPTIONS`` says
    otherwise, and psycopg then prepares nothing, not even on request; the
    threshold is lifted for this one call only (to a value no other statement
    reaches), so this statement is prepared and Django's own never are.
    """
    if connection.queries_logged or connection.execute_wrappers:
        with connection.cursor() as cursor:
            cursor.execute(statement, params)
            return cursor.fetchone()
    connection.ensure_connection()
    connection.validate_no_broken_transaction()
    pg = connection.connection
    cursor = _cursor_on(connection, pg)
    with connection.wrap_database_errors:
        if prepare and pg.prepare_threshold is None:
            pg.prepare_threshold = _ONLY_WHEN_ASKED
            try:
                cursor.execute(statement, params, prepare=True)
            finally:
                pg.prepare_threshold = None
        else:
            cursor.execute(statement, params, prepare=prepare)
        return cursor.fetchone()


def _cursor_on(connection: Any, pg: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
    """A psycopg cursor on ``pg``, kept on Django's ``connection`` between calls.

    A new cursor per enqueue also built its adapters anew (Django's timestamp
    loader among them), which cost about as much as the rest of ``execute_one``.
    A kept cursor running the same statement again keeps them. Django's
    connection objects belong to one thread, and so does this cursor; a new
    psycopg connection (Django reconnected) gets a new cursor.
    """
    cursor: psycopg.Cursor[Any] | None = getattr(connection, "_pgqueue_cursor", None)
    if cursor is None or cursor.connection is not pg or cursor.closed:
        cursor = connection._pgqueue_cursor = psycopg.Cursor(pg)
    return cursor


def run_lease_extension(
    conn: Any, statement: str, ids: list[int], tokens: list[uuid.UUID], lease: float
) -> list[tuple[Any, ...]]:
    """Run a lease extension ``statement`` (sql.fragments.extend_leases) for held rows."""
    # Array literals: every held row is in this statement, and psycopg's list
    # dumper adapted each id and token one by one.
    params = {
        "lease": lease,
        "ids": array_literal([str(i) for i in ids]),
        "tokens": array_literal([str(t) for t in tokens]),
    }
    return conn.execute(statement, params).fetchall()
