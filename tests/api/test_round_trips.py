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

from django_pgqueue.bench.views import ceiling_event
from django_pgqueue.conf import get_settings

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


def test_post_events_is_five_round_trips_the_ceiling_three(api, tenants):
    client = api("send")
    client.post("events", _event())  # the connection is open and warm
    answer, trips = _round_trips(lambda: client.post("events", _event()))
    assert answer.status_code == 202
    assert trips == [
        "pgqueue:api_authenticate",  # the key, its rate-limit row, last_used_at: autocommit
        "BEGIN",
        "pgqueue:insert_event",
        "pgqueue:fan_out",
        "COMMIT",
    ]
    # An event of an application looks the application up first: one more.
    answer, trips = _round_trips(lambda: client.post("events", _event("cust_a")))
    assert answer.status_code == 202
    assert trips[1:3] == ["BEGIN", "pgqueue:select_application"] and len(trips) == 6

    def ceiling() -> Any:
        body = json.dumps(_event())
        return ceiling_event(RequestFactory().post("/", body, content_type="application/json"))

    answer, trips = _round_trips(ceiling)
    assert answer.status_code == 202
    assert trips == ["BEGIN", "pgqueue:insert_event", "COMMIT"]
