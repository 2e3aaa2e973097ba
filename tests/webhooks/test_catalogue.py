"""The event type catalogue: declared types, JSON Schema validation on send when asked,
misdeclarations refused at startup, and the portal's list."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_pgqueue import send_event
from django_pgqueue.conf import validate_webhooks
from django_pgqueue.exceptions import EventSchemaError
from django_pgqueue.models import Event

pytestmark = [pytest.mark.django_db(transaction=True)]

ORDER_PAID = {
    "description": "An order was paid.",
    "schema": {
        "type": "object",
        "required": ["order_id", "amount"],
        "properties": {"order_id": {"type": "integer"}, "amount": {"type": "integer"}},
    },
}


@pytest.fixture
def declared(webhooks_conf):
    def configure(**overrides):
        webhooks_conf(
            EVENT_TYPES={"order.paid": ORDER_PAID, "order.note": {"description": "Free text."}},
            **overrides,
        )

    configure()
    return configure


def test_validation_refuses_what_the_schema_refuses_and_writes_nothing(declared):
    with pytest.raises(EventSchemaError, match=r"'order.paid'.*\$\.amount.*not of type"):
        send_event("order.paid", {"order_id": 1, "amount": "12"}, validate=True)
    with pytest.raises(EventSchemaError, match="'amount' is a required property"):
        send_event("order.paid", {"order_id": 1}, validate=True)
    with pytest.raises(EventSchemaError, match=r"not a declared event type.*order\.note"):
        send_event("order.unknown", {}, validate=True)
    assert Event.objects.count() == 0
    send_event("order.paid", {"order_id": 1, "amount": 1200}, validate=True)
    send_event("order.note", {"anything": ["goes"]}, validate=True)  # no schema declared
    assert Event.objects.count() == 2


def test_validation_is_off_unless_asked(declared):
    send_event("order.unknown", {"x": 1})
    send_event("order.paid", {"amount": "not checked"})
    declared(VALIDATE_EVENT_TYPES=True)
    with pytest.raises(EventSchemaError):
        send_event("order.unknown", {"x": 1})
    send_event("order.unknown", {"x": 1}, validate=False)
    assert Event.objects.count() == 3


@pytest.mark.parametrize(
    ("catalogue", "message"),
    [
        ({"order paid": {"description": ""}}, "not a valid event type name"),
        ({"order.paid": "An order"}, "must be a dict"),
        ({"order.paid": {"description": "", "schema": {"type": "nonsense"}}}, "not a valid JSON"),
        ({"order.paid": {"description": "", "extra": 1}}, "must be a dict"),
        (["order.paid"], "must be a dict"),
    ],
)
def test_a_misdeclared_catalogue_is_refused_at_startup(catalogue, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        validate_webhooks({"EVENT_TYPES": catalogue})


def test_the_portal_lists_the_event_types(declared, settings):
    from django.contrib.auth.models import User
    from django.test import Client

    from django_pgqueue.models import Application

    settings.PGQUEUE = {
        **settings.PGQUEUE,
        "WEBHOOKS": {
            **settings.PGQUEUE["WEBHOOKS"],
            "PORTAL_APPLICATION": "testproject.demo.portal.current_application",
        },
    }
    Application.objects.create(uid="cust_a")
    client = Client()
    client.force_login(User.objects.create_user("cust_a"))
    page = client.get("/webhooks/event-types/").content.decode()
    assert "order.paid" in page and "An order was paid." in page and "&quot;amount&quot;" in page
