"""A worker killed after the receiver answered, before the outcome was written (F1):
the delivery is sent again with the same id and body, and both attempts are logged."""

from __future__ import annotations

import pytest

from django_pgqueue import send_event
from django_pgqueue.models import Delivery, DeliveryAttempt
from django_pgqueue.webhooks import verify

from ..conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.fault]


def test_kill_after_2xx_redelivers_same_message(receiver, make_endpoint, worker_process):
    endpoint = make_endpoint(receiver.url("/ok"))
    event = send_event("order.paid", {"order_id": 42})
    env = {"PGQUEUE_LEASE_SECONDS": "1.5", "PGQUEUE_POLL_INTERVAL": "0.1"}
    first = worker_process(
        "--concurrency",
        "1",
        env={**env, "PGQUEUE_TEST_HOOKS": "1", "PGQUEUE_TEST_PAUSE_AT": "after_http_response"},
    )
    line = first.wait_line("PAUSED after_http_response")
    assert line.split()[2] == str(Delivery.objects.get(event=event).pk)
    assert len(receiver.hits("/ok")) == 1
    first.kill()

    second = worker_process("--burst", env=env)
    assert second.wait(60) == 0, second.output()
    delivery = Delivery.objects.get(event=event)
    assert delivery.status == "succeeded" and delivery.attempts == 2
    wait_for(lambda: len(receiver.hits("/ok")) == 2, 10, "the redelivery")
    one, two = receiver.hits("/ok")
    assert one.headers["webhook-id"] == two.headers["webhook-id"] == event.msg_id
    assert one.body == two.body
    assert one.headers["webhook-timestamp"] != two.headers["webhook-timestamp"]
    for request in (one, two):
        verify(endpoint.secret, request.body, request.headers)
    errors = list(
        DeliveryAttempt.objects.filter(delivery=delivery)
        .order_by("id")
        .values_list("attempt", "error")
    )
    assert [attempt for attempt, _ in errors] == [1, 2]
    assert errors[0][1].startswith("LeaseExpired") and errors[1][1] == ""
