"""Operational webhooks: signals when an endpoint is disabled, a breaker opens or a
delivery goes dead, and the project's own operational endpoint, signed like the rest."""

from __future__ import annotations

import json

import pytest

from django_pgqueue import send_event
from django_pgqueue.models import Application, Delivery, Endpoint
from django_pgqueue.webhooks import operational, verify
from testproject.demo import receivers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("webhooks_conf")]


@pytest.fixture
def heard():
    got: list[tuple[str, object]] = []

    def listen(name):
        def receiver(sender, **kwargs):
            got.append((name, kwargs.get("endpoint") or kwargs.get("delivery")))

        return receiver

    listeners = {
        operational.endpoint_disabled: listen("disabled"),
        operational.breaker_opened: listen("opened"),
        operational.delivery_dead: listen("dead"),
    }
    for signal, receiver in listeners.items():
        signal.connect(receiver)
    yield got
    for signal, receiver in listeners.items():
        signal.disconnect(receiver)


def test_a_410_disables_the_endpoint_and_says_so(receiver, make_endpoint, run_worker, heard):
    receiver.routes["/gone"] = receivers.status(410)
    customer = Application.objects.create(uid="cust_1")
    endpoint = make_endpoint(receiver.url("/gone"), application=customer)
    send_event("order.paid", {"n": 1}, application="cust_1")
    run_worker()
    assert [(name, obj.pk) for name, obj in heard] == [("disabled", endpoint.pk)]
    assert "410" in heard[0][1].disabled_reason
    assert heard[0][1].application.uid == "cust_1"


def test_breaker_opening_and_dead_deliveries_are_signalled_once(
    receiver, make_endpoint, run_worker, heard, webhooks_conf
):
    webhooks_conf(RETRY_SCHEDULE=[0], BREAKER_THRESHOLD=2, BREAKER_COOLDOWN=60.0)
    receiver.routes["/down"] = receivers.status(500)
    endpoint = make_endpoint(receiver.url("/down"))
    event = send_event("order.paid", {"n": 1})
    run_worker()
    delivery = Delivery.objects.get(event=event)
    assert delivery.status == "dead"
    assert sorted((name, obj.pk) for name, obj in heard) == [
        ("dead", delivery.pk),
        ("opened", endpoint.pk),
    ]


def test_a_raising_receiver_never_undoes_the_completion(receiver, make_endpoint, run_worker):
    def boom(sender, **kwargs):
        raise RuntimeError("receiver bug")

    operational.endpoint_disabled.connect(boom)
    try:
        receiver.routes["/gone"] = receivers.status(410)
        endpoint = make_endpoint(receiver.url("/gone"))
        event = send_event("order.paid", {"n": 1})
        run_worker()
    finally:
        operational.endpoint_disabled.disconnect(boom)
    assert Delivery.objects.get(event=event).attempts == 1
    assert not Endpoint.objects.get(pk=endpoint.pk).is_active


def test_the_operational_endpoint_receives_signed_events(
    receiver, make_endpoint, run_worker, webhooks_conf
):
    webhooks_conf(OPERATIONAL_APPLICATION="ops")
    ops = Application.objects.create(uid="ops", name="Our own ops")
    ops_endpoint = make_endpoint(receiver.url("/ops"), application=ops)
    customer = Application.objects.create(uid="cust_1")
    receiver.routes["/gone"] = receivers.status(410)
    gone = make_endpoint(receiver.url("/gone"), application=customer)
    send_event("order.paid", {"n": 1}, application="cust_1")
    run_worker()
    run_worker()  # the operational event queued by the first run
    hits = receiver.hits("/ops")
    kinds = sorted(json.loads(r.body)["data"]["endpoint_id"] for r in hits)
    assert kinds == [gone.pk]
    for request in hits:
        verify(ops_endpoint.secret, request.body, request.headers)
    types = sorted(e.event_type for e in ops.events.all())
    assert types == ["pgqueue.endpoint.disabled"]
    body = json.loads(hits[0].body)["data"]
    assert body["application"] == "cust_1" and "410" in body["disabled_reason"]


def test_the_operational_application_does_not_feed_itself(
    receiver, make_endpoint, run_worker, webhooks_conf
):
    webhooks_conf(OPERATIONAL_APPLICATION="ops")
    ops = Application.objects.create(uid="ops")
    receiver.routes["/gone"] = receivers.status(410)
    make_endpoint(receiver.url("/gone"), application=ops)
    send_event("order.paid", {"n": 1}, application="ops")
    run_worker()
    assert ops.events.count() == 1  # the event sent above, no operational one
