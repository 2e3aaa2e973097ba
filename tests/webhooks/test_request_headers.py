"""The attempt log records the request headers each attempt sent, redacted by one rule.

A real receiver on 127.0.0.1 (or a real broker) gets headers X; the attempt log, the
admin's attempt view, the portal's delivery page and the HTTP API's attempt log show
exactly X, with the values of credential headers replaced by ``[redacted]``.
"""

from __future__ import annotations

import html
import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from django_pgqueue import send_event
from django_pgqueue.api.keys import CUSTOMER_SCOPES, create_key
from django_pgqueue.models import Application, Delivery, DeliveryAttempt
from django_pgqueue.webhooks.redaction import REDACTED, is_sensitive, redact_headers
from testproject.demo import receivers

from .test_brokers import amqp_url, rabbit, stream  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("webhooks_conf")]

#: Custom endpoint headers: two credentials by the built-in rule, one declared by the
#: REDACT_HEADERS setting (in another case than the setting's), two plain ones.
CUSTOM = {
    "Authorization": "Bearer tok-AUTH-9f2c",
    "X-Shop-Token": "tok-SHOP-77aa",
    "x-tenant-pin": "PIN-4411",
    "X-Tenant": "acme",
    "X-Region": "eu-west",
}
SECRET_VALUES = ("tok-AUTH-9f2c", "tok-SHOP-77aa", "PIN-4411")


def expected_log(sent: dict[str, str]) -> dict[str, str]:
    """What the attempt log must show for headers ``sent``: the same names and values,
    credentials redacted (written out here, not by the code under test)."""
    redacted = {"authorization", "x-shop-token", "x-tenant-pin"}
    return {name: REDACTED if name.lower() in redacted else v for name, v in sent.items()}


@pytest.fixture
def redacting(webhooks_conf: Any) -> None:
    webhooks_conf(REDACT_HEADERS=["X-Tenant-PIN"])


def test_the_rule_redacts_credentials_and_keeps_the_standard_headers():
    for name in ("Authorization", "proxy-authorization", "Cookie", "X-Api-Key", "X-Auth-User"):
        assert is_sensitive(name), name
    for name in ("X-Client-Secret", "X-Session-Id", "X-Password", "X-Access-Token", "Api_Key"):
        assert is_sensitive(name), name
    kept = ("webhook-id", "webhook-timestamp", "webhook-signature", "Idempotency-Key")
    for name in (*kept, "Content-Type", "User-Agent", "traceparent", "X-Tenant", "Host"):
        assert not is_sensitive(name), name
    assert is_sensitive("X-Tenant-Pin", extra=["x-tenant-pin"])
    assert redact_headers({"B": "1", "Authorization": "x", "A": "2"}) == {
        "B": "1",
        "Authorization": REDACTED,
        "A": "2",
    }


def test_the_attempt_log_shows_exactly_the_headers_the_receiver_got(
    redacting, receiver, make_endpoint, run_worker
):
    receiver.routes["/flaky"] = receivers.flaky(1)
    endpoint = make_endpoint(receiver.url("/flaky"), headers=CUSTOM)
    event = send_event("order.paid", {"order_id": 1})
    run_worker()
    delivery = Delivery.objects.get(event=event)
    assert delivery.status == "succeeded" and delivery.attempts == 2
    requests = receiver.hits("/flaky")
    attempts = list(DeliveryAttempt.objects.filter(delivery=delivery).order_by("id"))
    assert len(requests) == len(attempts) == 2
    for request, attempt in zip(requests, attempts, strict=True):
        # Every header the receiver got, in the case it got it, and nothing else.
        assert attempt.request_headers == expected_log(request.headers)
        assert request.headers["Authorization"] == CUSTOM["Authorization"]  # sent as is
    first, second = (a.request_headers for a in attempts)
    assert first["webhook-id"] == second["webhook-id"] == event.msg_id
    assert first["webhook-signature"].startswith("v1,")
    assert first["Host"] == f"127.0.0.1:{receiver.port}"
    # No credential anywhere in the stored rows.
    with_rows = json.dumps([a.request_headers for a in attempts])
    assert not any(secret in with_rows for secret in SECRET_VALUES)
    assert endpoint.headers == CUSTOM  # the endpoint's own configuration is unchanged


def test_admin_portal_and_api_show_the_recorded_headers(
    redacting, receiver, make_endpoint, run_worker, admin_client, settings
):
    settings.PGQUEUE = {
        **settings.PGQUEUE,
        "WEBHOOKS": {
            **settings.PGQUEUE["WEBHOOKS"],
            "PORTAL_APPLICATION": "testproject.demo.portal.current_application",
        },
    }
    application = Application.objects.create(uid="cust_h")
    make_endpoint(receiver.url("/ok"), headers=CUSTOM, application=application)
    event = send_event("order.paid", {"order_id": 2}, application="cust_h")
    run_worker()
    delivery = Delivery.objects.get(event=event)
    [request] = receiver.hits("/ok")
    expected = expected_log(request.headers)

    key = create_key("test", CUSTOMER_SCOPES, application="cust_h").key
    api = Client().get(
        f"/webhooks/api/deliveries/{delivery.pk}", headers={"Authorization": f"Bearer {key}"}
    )
    assert api.status_code == 200, api.content[:300]
    [shown] = api.json()["attempts_log"]
    assert shown["request_headers"] == expected

    customer = Client()
    customer.force_login(User.objects.create(username="cust_h"))
    portal = html.unescape(customer.get(f"/webhooks/deliveries/{delivery.pk}/").content.decode())
    admin = html.unescape(
        admin_client.get(
            reverse("admin:django_pgqueue_delivery_change", args=(delivery.pk,))
        ).content.decode()
    )
    for page in (portal, admin):
        assert f"{REDACTED}" in page and request.headers["webhook-signature"] in page
        assert not any(secret in page for secret in SECRET_VALUES)
    for name, value in expected.items():
        assert f"{name}: {value}" in portal
        assert f'"{name}": {json.dumps(value)}' in admin


def test_a_refused_attempt_records_no_headers(receiver, make_endpoint, run_worker, webhooks_conf):
    make_endpoint(receiver.url("/ok"))
    webhooks_conf(ALLOW_NETWORKS=[])  # refused at send time now
    event = send_event("order.paid", {"order_id": 3})
    run_worker()
    attempt = DeliveryAttempt.objects.filter(delivery__event=event).first()
    assert attempt is not None
    assert attempt.error.startswith("refused") and attempt.request_headers == {}
    assert receiver.hits("/ok") == []


def test_a_nats_attempt_records_the_message_headers(
    redacting,
    stream,  # noqa: F811
    make_endpoint,
    run_worker,
):
    make_endpoint(f"nats://127.0.0.1:4222?subject={stream['subject']}", headers=CUSTOM)
    event = send_event("order.paid", {"order_id": 4})
    run_worker()
    [message] = stream["messages"]()
    [attempt] = DeliveryAttempt.objects.filter(delivery__event=event)
    assert attempt.request_headers == expected_log(dict(message.headers))
    assert attempt.request_headers["Nats-Msg-Id"] == event.msg_id


def test_an_amqp_attempt_records_the_message_headers(
    redacting,
    rabbit,  # noqa: F811
    make_endpoint,
    run_worker,
):
    make_endpoint(amqp_url(rabbit["exchange"]), headers=CUSTOM)
    event = send_event("order.paid", {"order_id": 5})
    run_worker()
    method, properties, _body = rabbit["channel"].basic_get(rabbit["queue"], auto_ack=True)
    assert method is not None
    [attempt] = DeliveryAttempt.objects.filter(delivery__event=event)
    received = {k: v.decode() if isinstance(v, bytes) else v for k, v in properties.headers.items()}
    assert attempt.request_headers == expected_log(received)
    assert attempt.request_headers["webhook-id"] == properties.message_id == event.msg_id
