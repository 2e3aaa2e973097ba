"""Deliveries refused by our own SSRF settings: paced, not blamed on the receiver, and
retried at once when their endpoint is saved."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from django_pgqueue import send_event
from django_pgqueue.models import Delivery, DeliveryAttempt, Endpoint
from django_pgqueue.webhooks import store

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("webhooks_conf")]


def test_a_refused_delivery_waits_at_the_breaker_pace_and_goes_when_the_endpoint_is_saved(
    receiver, make_endpoint, run_worker, webhooks_conf
):
    endpoint = make_endpoint(receiver.url("/ok"))
    # The schedule would retry at once; the settings now refuse loopback addresses.
    webhooks_conf(ALLOW_NETWORKS=[], BREAKER_COOLDOWN=600, BREAKER_THRESHOLD=1)
    event = send_event("order.paid", {"order_id": 1})
    run_worker()
    delivery = Delivery.objects.get(event=event)
    assert delivery.status == "failed" and delivery.attempts == 1
    assert delivery.next_attempt_at > timezone.now() + dt.timedelta(seconds=500)
    assert "refused: " in delivery.last_error and "ALLOW_NETWORKS" in delivery.last_error
    [attempt] = DeliveryAttempt.objects.filter(delivery=delivery)
    assert attempt.error.startswith("refused: ")
    # Our settings, not the receiver: the circuit stays closed.
    endpoint.refresh_from_db()
    assert endpoint.breaker_state == "closed" and endpoint.consecutive_failures == 0
    assert receiver.requests == []

    webhooks_conf()  # the operator fixes the settings
    # A bare model save writes the configuration and has no other effect ...
    Endpoint.objects.get(pk=endpoint.pk).save()
    delivery.refresh_from_db()
    assert delivery.next_attempt_at > timezone.now() + dt.timedelta(seconds=500)
    # ... the store's save (the admin's, the API's, the portal's) retries the refusal.
    store.save_endpoint(Endpoint.objects.get(pk=endpoint.pk))
    delivery.refresh_from_db()
    assert delivery.next_attempt_at <= timezone.now()
    run_worker()
    delivery.refresh_from_db()
    assert delivery.status == "succeeded" and delivery.attempts == 2
    assert len(receiver.hits("/ok")) == 1


def test_saving_an_endpoint_leaves_other_failures_on_their_schedule(
    make_endpoint, run_worker, webhooks_conf
):
    from testproject.demo import receivers

    webhooks_conf(RETRY_SCHEDULE=[600])
    endpoint = make_endpoint(f"http://127.0.0.1:{receivers.free_port()}/")
    event = send_event("order.paid", {"order_id": 1})
    run_worker()
    delivery = Delivery.objects.get(event=event)
    assert delivery.status == "failed" and delivery.last_error.endswith("connection refused")
    due = delivery.next_attempt_at
    store.save_endpoint(endpoint)
    delivery.refresh_from_db()
    assert delivery.next_attempt_at == due


def test_the_refusal_pace_doubles_from_the_cooldown_up_to_its_cap():
    from django_pgqueue.webhooks.breaker import refusal_delay, refused_by_configuration
    from django_pgqueue.webhooks.transport import TransportResult

    conf = {"BREAKER_COOLDOWN": 30.0, "BREAKER_MAX_COOLDOWN": 3600.0}
    assert [refusal_delay(n, 0.0, conf) for n in (1, 2, 3, 8, 9)] == [30, 60, 120, 3600, 3600]
    assert refusal_delay(3, 1800.0, conf) == 1800.0  # the schedule's longer delay wins
    assert refused_by_configuration(TransportResult(error="refused: The address ..."))
    assert not refused_by_configuration(
        TransportResult(error="refused: The host 'x.test' could not be resolved (...)")
    )
    assert not refused_by_configuration(TransportResult(error="connection refused"))
