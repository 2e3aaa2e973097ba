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
    # What the customer can read (API, portal) names the URL's host, never the
    # address it resolved to or the operator's settings.
    attempt_error = (
        "refused: The address 127.0.0.1 is a private or reserved address, which cannot "
        "receive webhooks."
    )
    assert delivery.last_error == f"attempt 1: {attempt_error}"
    [attempt] = DeliveryAttempt.objects.filter(delivery=delivery)
    assert attempt.error == attempt_error
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


def test_the_operator_sees_why_a_refused_delivery_was_refused(
    receiver, make_endpoint, run_worker, webhooks_conf, admin_client, caplog
):
    endpoint = make_endpoint(receiver.url("/ok"))
    webhooks_conf(ALLOW_NETWORKS=[])
    event = send_event("order.paid", {"order_id": 1})
    with caplog.at_level("WARNING", logger="django_pgqueue.webhooks"):
        run_worker()
    delivery = Delivery.objects.get(event=event)
    assert delivery.attempts == 1 and delivery.status == "failed"  # kept, not lost
    detail = "The address 127.0.0.1 is a loopback address"
    logged = [r.getMessage() for r in caplog.records if "refused at send time" in r.getMessage()]
    assert logged and detail in logged[0] and "PGQUEUE['WEBHOOKS']['ALLOW_NETWORKS']" in logged[0]
    assert endpoint.url in logged[0]

    page = admin_client.get(f"/admin/django_pgqueue/delivery/{delivery.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Checked now:" in html and detail in html
    assert "PGQUEUE[&#x27;WEBHOOKS&#x27;][&#x27;ALLOW_NETWORKS&#x27;]" in html


def test_the_customer_is_told_the_url_is_refused_but_not_where_it_resolves(webhooks_conf, caplog):
    from django.core.exceptions import ValidationError

    webhooks_conf(ALLOW_NETWORKS=[], ALLOW_HTTP=False)
    endpoint = Endpoint(url="https://localhost:8443/hook")  # /etc/hosts: loopback
    with (
        caplog.at_level("WARNING", logger="django_pgqueue.webhooks"),
        pytest.raises(ValidationError) as info,
    ):
        endpoint.full_clean()
    [message] = info.value.message_dict["url"]
    assert message == (
        "This URL cannot receive webhooks: The host 'localhost' points to a private or "
        "reserved address, which cannot receive webhooks."
    )
    assert "127.0.0.1" not in message and "::1" not in message and "PGQUEUE" not in message
    [logged] = [r.getMessage() for r in caplog.records if "refused at save time" in r.getMessage()]
    assert "resolves to" in logged and "ALLOW_NETWORKS" in logged
