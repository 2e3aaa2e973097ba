"""A broker endpoint added by a customer in the portal delivers, through the machine's
real RabbitMQ and NATS JetStream (the broker tests' fixtures: they skip, saying so,
when a broker is not running)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_pgqueue import send_event
from django_pgqueue.models import Application, Delivery, Endpoint
from django_pgqueue.webhooks import verify

from ..webhooks.conftest import FAST_WEBHOOKS
from ..webhooks.test_brokers import amqp_url, rabbit, stream  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)

PORTAL = "/webhooks/"


@pytest.fixture
def customer(settings: Any) -> Client:
    settings.PGQUEUE = {
        **settings.PGQUEUE,
        "POLL_INTERVAL": 0.05,
        "WEBHOOKS": {
            **FAST_WEBHOOKS,
            "PORTAL_APPLICATION": "testproject.demo.portal.current_application",
            "PORTAL_DESTINATIONS": ["https", "amqp", "nats"],
        },
    }
    Application.objects.create(uid="cust_a")
    client = Client()
    client.force_login(User.objects.get_or_create(username="cust_a")[0])
    return client


def add_endpoint(client: Client, url: str) -> Endpoint:
    created = client.post(f"{PORTAL}endpoints/new/", {"url": url, "event_types": "order.*"})
    assert created.status_code == 302, created.context["form"].errors
    endpoint = Endpoint.objects.get(application__uid="cust_a")
    # What the customer sees of it: the password masked.
    page = client.get(f"{PORTAL}endpoints/{endpoint.pk}/").content.decode()
    assert ":***@" in page and ":guest@" not in page
    return endpoint


def test_an_amqp_endpoint_added_in_the_portal_delivers_to_rabbitmq(
    customer,
    rabbit,  # noqa: F811
    run_worker,
):
    endpoint = add_endpoint(customer, amqp_url(rabbit["exchange"]))
    event = send_event("order.paid", {"order_id": 1}, application="cust_a")
    run_worker()
    delivery = Delivery.objects.get(event=event, endpoint=endpoint)
    assert delivery.status == "succeeded", delivery.last_error
    method, properties, body = rabbit["channel"].basic_get(rabbit["queue"], auto_ack=True)
    assert method is not None, "the confirmed message is not in the queue"
    assert body == event.request_body().encode()
    verify(endpoint.secret, body, properties.headers)


def test_a_nats_endpoint_added_in_the_portal_delivers_to_jetstream(
    customer,
    stream,  # noqa: F811
    run_worker,
):
    url = f"nats://guest:guest@127.0.0.1:4222?subject={stream['subject']}"
    endpoint = add_endpoint(customer, url)
    event = send_event("order.paid", {"order_id": 2}, application="cust_a")
    run_worker()
    delivery = Delivery.objects.get(event=event, endpoint=endpoint)
    assert delivery.status == "succeeded", delivery.last_error
    [message] = stream["messages"]()
    assert message.data == event.request_body().encode()
    verify(endpoint.secret, message.data, message.headers)
