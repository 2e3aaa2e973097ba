"""The round trips of the ingest path, as docs/performance.md ("HTTP API ingest")
counts them: each message the client sends that waits for an answer (a simple
``Query``, or the ``Sync`` ending an extended-protocol one), read from libpq's own
protocol trace of the connection, so ``BEGIN`` and ``COMMIT`` count too."""

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
    sent = [line.split("\t") for line in lines if "\tF\t" in line]
    trips = [fields[4].strip().strip('"') for fields in sent if fields[3] in ("Query", "Sync")]
    return answer, [statement.split("*/")[0].strip("/* ").split()[0] for statement in trips]


def _event(application: str | None = None) -> dict[str, Any]:
    event = {"event_type": "order.paid", "payload": {"id": 1}}
    return {**event, "application": application} if application else event


def test_post_events_is_two_round_trips_the_ceiling_one(api, tenants):
    client = api("send")
    client.post("events", _event())  # the connection is open and warm
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
    send_event("order.paid", {"id": 0})  # the connection is open and warm
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
