"""The round trips of the ingest path, as docs/performance.md ("HTTP API ingest")
counts them: each message the client sends that waits for an answer (a simple
``Query``, or the ``Sync`` ending an extended-protocol one, named by the statement
it parsed or bound), read from libpq's own protocol trace of the connection, so
``BEGIN`` and ``COMMIT`` count too."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connections
from django.test import RequestFactory

from django_pgqueue import send_event
from django_pgqueue.bench.views import ceiling_event
from django_pgqueue.conf import get_settings
from django_pgqueue.models import Delivery

pytestmark = pytest.mark.django_db(transaction=True)


def _round_trips(call: Callable[[], Any]) -> tuple[Any, list[str]]:
    """``call()``'s answer, and the statements it sent, one per round trip."""
    connection = connections[get_settings().DATABASE]
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    fd, path = tempfile.mkstemp()
    try:
        pgconn.trace(fd)
        try:
            answer = call()
        finally:
            pgconn.untrace()
        with open(path) as trace:
            lines = trace.read().splitlines()
    finally:
        os.close(fd)
        os.unlink(path)
    # Statements prepared before the trace began are named by the session itself.
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, statement FROM pg_prepared_statements")
        prepared = dict(cursor.fetchall())
    trips, statement = [], ""
    for fields in (line.split("\t") for line in lines if "\tF\t" in line):
        message, text = fields[3], fields[4].strip() if len(fields) > 4 else ""
        if message == "Query":
            trips.append(text.strip('"'))
        elif message == "Parse":  # Parse "name" "text" ...: the text is the statement
            name, query = text.split('" "', 1)
            prepared[name.strip('"')] = statement = query.rsplit('"', 1)[0]
        elif message == "Bind":  # Bind "portal" "name" ...: a prepared statement
            statement = prepared[text.split('" "', 1)[1].split('"', 1)[0]]
        elif message == "Sync":  # the end of an extended-protocol round trip
            trips.append(statement)
    return answer, [statement.split("*/")[0].strip("/* ").split()[0] for statement in trips]


def _event(application: str | None = None) -> dict[str, Any]:
    event = {"event_type": "order.paid", "payload": {"id": 1}}
    return {**event, "application": application} if application else event


def test_post_events_is_two_round_trips_the_ceiling_one(api, tenants):
    client = api("send")
    # The connection is open and warm: each statement is prepared at its first use
    # on a connection, a round trip more then (test_..._prepared_once_per_connection).
    client.post("events", _event())
    client.post("events", _event("cust_a"))
    ceiling_event(RequestFactory().post("/", json.dumps(_event()), content_type="application/json"))
    answer, trips = _round_trips(lambda: client.post("events", _event()))
    assert answer.status_code == 202
    assert trips == [
        "pgqueue:api_authenticate",  # the key, its rate-limit row, last_used_at: autocommit
        "pgqueue:record_event",  # the event and its fan-out, one statement: autocommit
    ]
    # An event of an application looks the application up in the same statement.
    answer, trips = _round_trips(lambda: client.post("events", _event("cust_a")))
    assert answer.status_code == 202
    assert trips == [
        "pgqueue:api_authenticate",
        "pgqueue:record_application_event",
    ]

    def ceiling() -> Any:
        body = json.dumps(_event())
        return ceiling_event(RequestFactory().post("/", body, content_type="application/json"))

    answer, trips = _round_trips(ceiling)
    assert answer.status_code == 202
    assert trips == ["pgqueue:insert_event"]


def test_send_event_is_one_statement(tenants):
    """The application's lookup, the event and its fan-out travel as one statement:
    a second one here (the fan-out, the lookup) is a round trip per event again.
    Outside a transaction it runs alone, in autocommit; in the caller's, under a
    savepoint."""
    send_event("order.paid", {"id": 0})  # the connection is open, both statements prepared
    send_event("order.paid", {"id": 0}, application="cust_a")
    event, trips = _round_trips(lambda: send_event("order.paid", {"id": 1}))
    assert trips == ["pgqueue:record_event"]
    assert [d.endpoint for d in Delivery.objects.filter(event=event)] == [tenants["ep_global"]]
    event, trips = _round_trips(
        lambda: send_event("order.paid", {"id": 2}, application="cust_a", idempotency_key="k")
    )
    assert trips == ["pgqueue:record_application_event"]
    assert [d.endpoint for d in Delivery.objects.filter(event=event)] == [tenants["ep_a"]]
    # A repeat of the key reads the first event back: one query more, only then.
    again, trips = _round_trips(
        lambda: send_event("order.paid", {"id": 2}, application="cust_a", idempotency_key="k")
    )
    assert again.pk == event.pk and len(trips) == 2
    assert Delivery.objects.filter(event=event).count() == 1


def test_send_event_in_the_caller_s_transaction_runs_there(tenants):
    """In the caller's transaction the statement runs under a savepoint: it commits
    or rolls back with the caller's work, and a refusal leaves that transaction
    usable."""
    from django.db import transaction

    from django_pgqueue.exceptions import UnknownApplication
    from django_pgqueue.models import Event

    send_event("order.paid", {"id": 0})  # the connection is open and warm
    with transaction.atomic(using=get_settings().DATABASE):
        event, trips = _round_trips(lambda: send_event("order.paid", {"id": 3}))
        # The caller's BEGIN (its transaction's first statement), then the savepoint.
        assert trips == ["BEGIN", "SAVEPOINT", "pgqueue:record_event", "RELEASE"]
        with pytest.raises(UnknownApplication):
            send_event("order.paid", {"id": 4}, application="cust_none")
        assert Event.objects.filter(pk=event.pk).exists()  # still usable
        transaction.set_rollback(True, using=get_settings().DATABASE)
    assert not Event.objects.filter(pk=event.pk).exists()


def _prepared(connection: Any) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return sorted(
            row[0].split("*/")[0].strip("/* ") for row in cursor.fetchall() if "pgqueue:" in row[0]
        )


def test_the_ingest_statements_are_prepared_once_per_connection(api, tenants):
    """Parsing and planning the authentication and the event's statement on every
    request cost the database more than running them (docs/performance.md, "HTTP API
    ingest"): both are prepared on the connection's first request and reused."""
    connection = connections[get_settings().DATABASE]
    client = api("send")
    connection.close()  # a fresh session: nothing prepared yet
    for application in (None, None, "cust_a", "cust_a"):
        assert client.post("events", _event(application)).status_code == 202
    assert _prepared(connection) == [
        "pgqueue:api_authenticate",
        "pgqueue:record_application_event",
        "pgqueue:record_event",
    ]
    assert connection.connection.prepare_threshold is None  # Django's own stay unprepared
    # send_event, the Python door, shares the event's statement.
    send_event("order.paid", {"id": 9})
    assert len(_prepared(connection)) == 3


def test_the_ingest_prepares_nothing_when_prepared_statements_are_off(api, tenants, settings):
    """Behind PgBouncer < 1.21 in transaction mode (PREPARED_STATEMENTS False)."""
    settings.PGQUEUE = {**settings.PGQUEUE, "PREPARED_STATEMENTS": False}
    connection = connections[get_settings().DATABASE]
    client = api("send")
    connection.close()
    for application in (None, "cust_a"):
        assert client.post("events", _event(application)).status_code == 202
    send_event("order.paid", {"id": 9})
    assert _prepared(connection) == []
