"""An endpoint row read back from the database, where anyone with SQL may have written
it: its JSON columns hold the wrong shape. No door turns that into a 500, a dead
thread or a stuck delivery; each says which column is wrong."""

from __future__ import annotations

import pytest
from django.db import connection

from django_pgqueue import send_event
from django_pgqueue.models import Delivery, Endpoint
from django_pgqueue.webhooks.store import rotate_secret

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("webhooks_conf")]

MALFORMED = [
    ("headers", "42"),
    ("headers", "[1]"),
    ("headers", '{"X-A": 1}'),
    ("previous_secrets", "42"),
    ("previous_secrets", "[1]"),
    ("previous_secrets", '[{"secret": "x"}]'),
    ("previous_secrets", '[{"secret": "x", "expires_at": "tomorrow"}]'),
]


def _corrupt(endpoint: Endpoint, column: str, value: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE pgqueue_endpoint SET {column} = %s::jsonb WHERE id = %s", [value, endpoint.pk]
        )


@pytest.mark.parametrize(("column", "value"), MALFORMED)
def test_a_delivery_to_it_fails_its_attempt_naming_the_column(
    column, value, receiver, make_endpoint, run_worker
):
    endpoint = make_endpoint(receiver.url("/ok"))
    _corrupt(endpoint, column, value)
    event = send_event("order.paid", {"id": 1})
    run_worker()
    delivery = Delivery.objects.get(event=event)
    assert delivery.status in ("failed", "dead") and delivery.attempts >= 1
    named = "header" if column == "headers" else "previous secrets"
    assert named in delivery.last_error, delivery.last_error
    assert receiver.hits("/ok") == []  # never sent unsigned or half-built


@pytest.mark.parametrize(("column", "value"), [m for m in MALFORMED if m[0] == "previous_secrets"])
def test_a_rotation_replaces_malformed_previous_secrets(column, value, make_endpoint):
    endpoint = make_endpoint("https://127.0.0.1:9/h")
    _corrupt(endpoint, column, value)
    endpoint = Endpoint.objects.get(pk=endpoint.pk)
    rotate_secret(endpoint, grace=60)
    stored = Endpoint.objects.get(pk=endpoint.pk).previous_secrets
    assert len(stored) == 1 and set(stored[0]) == {"secret", "expires_at"}
