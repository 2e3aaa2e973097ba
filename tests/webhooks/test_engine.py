"""The delivery engine end to end: send_event -> worker -> real receivers on 127.0.0.1."""

from __future__ import annotations

import pytest

from django_pgqueue import send_event
from django_pgqueue.models import Delivery, DeliveryAttempt
from testproject.demo import receivers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("webhooks_conf")]


def test_success(receiver, make_endpoint, run_worker):
    receiver.routes["/ok"] = receivers.ok
    endpoint = make_endpoint(receiver.url("/ok"))
    event = send_event("order.paid", {"order_id": 42})
    run_worker()
    delivery = Delivery.objects.get(event=event, endpoint=endpoint)
    assert delivery.status == "succeeded"
    assert delivery.attempts == 1
    [request] = receiver.hits("/ok")
    assert request.body == b'{"order_id":42}'
    assert request.headers["webhook-id"] == event.msg_id
    [attempt] = DeliveryAttempt.objects.filter(delivery=delivery)
    assert attempt.status_code == 200 and attempt.error == "" and attempt.attempt == 1
