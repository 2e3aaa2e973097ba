"""Applications, channels and wildcard event types, tested against the fan-out SQL."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction

from django_pgqueue import send_event
from django_pgqueue.exceptions import UnknownApplication
from django_pgqueue.models import Application, Delivery, Endpoint, Event
from django_pgqueue.webhooks.routing import subscription_keys

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("webhooks_conf")]


def receivers_of(event):
    return set(Delivery.objects.filter(event=event).values_list("endpoint_id", flat=True))


@pytest.fixture
def tenants(make_endpoint):
    a = Application.objects.create(uid="cust_a", name="A")
    b = Application.objects.create(uid="cust_b", name="B")
    return {
        "a": a,
        "b": b,
        "a1": make_endpoint("http://127.0.0.1:9/a1", application=a),
        "a2": make_endpoint("http://127.0.0.1:9/a2", application=a, event_types=["invoice.paid"]),
        "b1": make_endpoint("http://127.0.0.1:9/b1", application=b),
        "global": make_endpoint("http://127.0.0.1:9/global"),
    }


def test_an_application_event_reaches_only_its_own_endpoints(tenants):
    event = send_event("order.paid", {"id": 1}, application="cust_a")
    assert receivers_of(event) == {tenants["a1"].pk}
    assert event.application_id == tenants["a"].pk
    assert Event.objects.get(pk=event.pk).application_id == tenants["a"].pk
    by_instance = send_event("order.paid", {"id": 2}, application=tenants["b"])
    assert receivers_of(by_instance) == {tenants["b1"].pk}


def test_an_event_without_application_reaches_only_global_endpoints(tenants):
    event = send_event("order.paid", {"id": 1})
    assert receivers_of(event) == {tenants["global"].pk}


def test_inactive_endpoints_of_the_application_get_nothing(tenants):
    Endpoint.objects.filter(pk=tenants["a1"].pk).update(is_active=False)
    event = send_event("order.paid", {"id": 1}, application="cust_a")
    assert receivers_of(event) == set()


@pytest.mark.parametrize("uid", ["nobody", "cust_off"])
def test_unknown_or_inactive_application_writes_nothing(tenants, uid):
    Application.objects.create(uid="cust_off", is_active=False)
    with transaction.atomic():
        with pytest.raises(UnknownApplication, match=repr(uid)):
            send_event("order.paid", {"id": 1}, application=uid)
        # The caller's transaction is still usable.
        assert Event.objects.count() == 0
    assert Event.objects.count() == 0 and Delivery.objects.count() == 0


@pytest.mark.parametrize("uid", ["", "has space", 42])
def test_a_malformed_application_uid_is_refused_before_any_sql(uid):
    with pytest.raises(ValueError, match="application uid"):
        send_event("order.paid", {"id": 1}, application=uid)
    assert Event.objects.count() == 0


def test_subscription_keys_are_the_type_and_its_dotted_wildcards():
    assert subscription_keys("order") == ["order"]
    assert subscription_keys("order.refund.failed") == [
        "order.refund.failed",
        "order.*",
        "order.refund.*",
    ]


def test_wildcard_subscriptions_in_the_fan_out(make_endpoint):
    app = Application.objects.create(uid="cust_w")
    orders = make_endpoint("http://127.0.0.1:9/o", application=app, event_types=["order.*"])
    refunds = make_endpoint(
        "http://127.0.0.1:9/r", application=app, event_types=["order.refund.*", "invoice.paid"]
    )
    exact = make_endpoint("http://127.0.0.1:9/e", application=app, event_types=["order"])
    every = make_endpoint("http://127.0.0.1:9/all", application=app)
    cases = {
        "order.paid": {orders.pk, every.pk},
        "order.refund.failed": {orders.pk, refunds.pk, every.pk},
        "invoice.paid": {refunds.pk, every.pk},
        "order": {exact.pk, every.pk},
        # "order.*" is a prefix ending at a dot: "orders.x" is another family.
        "orders.created": {every.pk},
    }
    for event_type, expected in cases.items():
        event = send_event(event_type, {}, application="cust_w")
        assert receivers_of(event) == expected, event_type


def test_channels_in_the_fan_out(make_endpoint):
    app = Application.objects.create(uid="cust_c")
    p7 = make_endpoint("http://127.0.0.1:9/p7", application=app, channels=["project-7"])
    p8 = make_endpoint("http://127.0.0.1:9/p8", application=app, channels=["project-8", "ops"])
    any_channel = make_endpoint("http://127.0.0.1:9/any", application=app)
    assert receivers_of(send_event("a.b", {}, application=app, channels=["project-7"])) == {
        p7.pk,
        any_channel.pk,
    }
    both = send_event("a.b", {}, application=app, channels=["project-7", "ops"])
    assert receivers_of(both) == {p7.pk, p8.pk, any_channel.pk}
    assert Event.objects.get(pk=both.pk).channels == ["project-7", "ops"]
    # An event without channels reaches only endpoints that take every channel.
    assert receivers_of(send_event("a.b", {}, application=app)) == {any_channel.pk}


@pytest.mark.parametrize(
    "channels",
    ["project-7", ["has space"], [""], ["x"] * 11, [7], {"a": 1}],
)
def test_bad_channels_are_refused_before_any_sql(channels):
    with pytest.raises(ValueError, match="channel"):
        send_event("a.b", {}, channels=channels)
    assert Event.objects.count() == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("event_types", ["order*"]),
        ("event_types", ["*"]),
        ("event_types", ["order.*.paid"]),
        ("event_types", "order.paid"),
        ("channels", ["has space"]),
        ("channels", "ops"),
    ],
)
def test_endpoint_subscriptions_are_validated(field, value, webhooks_conf):
    endpoint = Endpoint(url="http://127.0.0.1:9/x", **{field: value})
    with pytest.raises(ValidationError) as info:
        endpoint.full_clean()
    assert field in info.value.message_dict


def test_the_fan_out_reads_one_application_through_its_index(make_endpoint):
    """The plan of the application fan-out reads pgq_ep_app_idx, not the whole table."""
    from django.db import connection

    from django_pgqueue import sql

    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # tiny table: ask for the index
        cursor.execute(
            "EXPLAIN " + sql.RECORD_APPLICATION_EVENT,
            {
                "application": "cust_a",
                "event_type": "a.b",
                "body": "{}",
                "msg_id": "msg_1",
                "idempotency_key": None,
                "channels_json": "[]",
                "ordering_key": None,
                "max_attempts": 3,
                "type_keys": ["a.b", "a.*"],
                "channels": [],
            },
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "pgq_ep_app_idx" in plan, plan


def test_an_application_receiver_gets_its_events_end_to_end(receiver, make_endpoint, run_worker):
    a = Application.objects.create(uid="cust_a")
    b = Application.objects.create(uid="cust_b")
    make_endpoint(receiver.url("/a"), application=a)
    make_endpoint(receiver.url("/b"), application=b)
    send_event("order.paid", {"for": "a"}, application="cust_a")
    send_event("order.paid", {"for": "b"}, application="cust_b")
    run_worker()
    assert [json.loads(r.body)["data"] for r in receiver.hits("/a")] == [{"for": "a"}]
    assert [json.loads(r.body)["data"] for r in receiver.hits("/b")] == [{"for": "b"}]


def test_an_idempotency_key_of_another_application_is_refused_not_returned(tenants):
    first = send_event("order.paid", {"id": 1}, application="cust_a", idempotency_key="k-1")
    assert send_event("order.paid", {"id": 1}, application="cust_a", idempotency_key="k-1") == first
    for other in ("cust_b", None):
        with pytest.raises(ValueError, match="another application"):
            send_event("order.paid", {"id": 1}, application=other, idempotency_key="k-1")
    assert Event.objects.count() == 1
