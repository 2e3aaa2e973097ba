"""The customer portal with Django's test client: every page works for the customer's
own application, and every URL and form refuses another application's objects
(IDOR): a 404, never their data, secrets or responses."""

from __future__ import annotations

import html
import re

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from django_pgqueue import send_event
from django_pgqueue.models import Application, Delivery, DeliveryAttempt, Endpoint
from django_pgqueue.portal import urls as portal_urls
from django_pgqueue.portal.views import DISABLED_IN_PORTAL

pytestmark = pytest.mark.django_db

PORTAL = "/webhooks/"


@pytest.fixture(autouse=True)
def portal_settings(settings):
    settings.PGQUEUE = {
        **settings.PGQUEUE,
        "WEBHOOKS": {
            **settings.PGQUEUE["WEBHOOKS"],
            "ALLOW_NETWORKS": [],
            "ALLOW_HTTP": False,
            "PORTAL_APPLICATION": "testproject.demo.portal.current_application",
        },
    }


def login(username: str) -> Client:
    client = Client(enforce_csrf_checks=False)
    client.force_login(User.objects.get_or_create(username=username)[0])
    return client


@pytest.fixture
def world():
    """Two customers, each with an endpoint, an event, a delivery and an attempt."""
    objects = {}
    for name in ("cust_a", "cust_b"):
        app = Application.objects.create(uid=name)
        endpoint = Endpoint.objects.create(url=f"https://{name}.example.com/hook", application=app)
        send_event("order.paid", {"owner": name}, application=name)
        delivery = Delivery.objects.get(endpoint=endpoint)
        Delivery.objects.filter(pk=delivery.pk).update(status="dead", attempts=1)
        DeliveryAttempt.objects.create(
            delivery=delivery,
            attempt=1,
            started_at=delivery.created_at,
            status_code=500,
            response_body=f"private response of {name}",
        )
        objects[name] = {"app": app, "endpoint": endpoint, "delivery": delivery}
    return objects


def test_the_customer_sees_and_manages_their_own_endpoint(world):
    client = login("cust_a")
    mine = world["cust_a"]["endpoint"]
    page = client.get(PORTAL).content.decode()
    assert mine.url in page and "cust_b.example.com" not in page
    detail = client.get(f"{PORTAL}endpoints/{mine.pk}/").content.decode()
    assert "order.paid" in detail and mine.secret not in detail  # only on a POST
    secret = client.post(f"{PORTAL}endpoints/{mine.pk}/secret/")
    assert mine.secret in secret.content.decode()
    assert "no-cache" in secret["Cache-Control"] or "no-store" in secret["Cache-Control"]
    delivery = world["cust_a"]["delivery"]
    attempts = client.get(f"{PORTAL}deliveries/{delivery.pk}/").content.decode()
    assert "private response of cust_a" in attempts
    assert client.post(f"{PORTAL}deliveries/{delivery.pk}/replay/").status_code == 302
    assert Delivery.objects.get(pk=delivery.pk).status == "pending"


def test_a_delivery_shows_the_body_the_receiver_got(world):
    # The customer debugging their receiver sees the type, the timestamp and the data
    # exactly as the request carried them, not the bare payload.
    delivery = world["cust_a"]["delivery"]
    page = login("cust_a").get(f"{PORTAL}deliveries/{delivery.pk}/").content.decode()
    event = delivery.event
    assert html.escape(event.request_body()) in page
    assert "{&quot;type&quot;:&quot;order.paid&quot;,&quot;timestamp&quot;:" in page


def test_adding_an_endpoint_validates_it_in_customer_words(world):
    client = login("cust_a")
    refused = client.post(
        f"{PORTAL}endpoints/new/",
        {"url": "https://127.0.0.1/hook", "event_types": "order.*", "channels": ""},
    )
    assert refused.status_code == 200
    assert "This URL cannot receive webhooks" in refused.content.decode()
    bad_type = client.post(
        f"{PORTAL}endpoints/new/", {"url": "https://93.184.216.34/x", "event_types": "order*"}
    )
    assert "is not an event type" in bad_type.content.decode()
    assert Endpoint.objects.filter(application=world["cust_a"]["app"]).count() == 1
    created = client.post(
        f"{PORTAL}endpoints/new/",
        {
            "url": "https://93.184.216.34/x",
            "event_types": "order.*\ninvoice.paid",
            "channels": "project-7",
            "description": "ours",
        },
    )
    assert created.status_code == 302, created.context["form"].errors
    endpoint = Endpoint.objects.get(url="https://93.184.216.34/x")
    assert endpoint.application == world["cust_a"]["app"]
    assert endpoint.event_types == ["order.*", "invoice.paid"]
    assert endpoint.channels == ["project-7"]


def test_with_a_catalogue_the_form_names_the_types_and_refuses_a_typo(world, settings):
    settings.PGQUEUE = {
        **settings.PGQUEUE,
        "WEBHOOKS": {
            **settings.PGQUEUE["WEBHOOKS"],
            "EVENT_TYPES": {"order.paid": {}, "order.refunded": {}, "invoice.sent": {}},
        },
    }
    client = login("cust_a")
    page = client.get(f"{PORTAL}endpoints/new/").content.decode()
    assert "invoice.sent, order.paid, order.refunded" in page
    typo = client.post(
        f"{PORTAL}endpoints/new/", {"url": "https://93.184.216.34/t", "event_types": "order.piad"}
    )
    assert typo.status_code == 200
    assert "We send no event of type order.piad" in typo.content.decode()
    assert not Endpoint.objects.filter(url="https://93.184.216.34/t").exists()
    created = client.post(
        f"{PORTAL}endpoints/new/",
        {"url": "https://93.184.216.34/t", "event_types": "order.*\ninvoice.sent"},
    )
    assert created.status_code == 302, created.context["form"].errors
    assert Endpoint.objects.get(url="https://93.184.216.34/t").event_types == [
        "order.*",
        "invoice.sent",
    ]


def test_disable_enable_rotate_and_test_event(world):
    client = login("cust_a")
    endpoint = world["cust_a"]["endpoint"]
    old_secret = endpoint.secret
    client.post(f"{PORTAL}endpoints/{endpoint.pk}/disable/")
    disabled = Endpoint.objects.get(pk=endpoint.pk)
    assert not disabled.is_active and "by the customer" in disabled.disabled_reason
    client.post(f"{PORTAL}endpoints/{endpoint.pk}/enable/")
    assert Endpoint.objects.get(pk=endpoint.pk).is_active
    rotated = client.post(f"{PORTAL}endpoints/{endpoint.pk}/rotate/").content.decode()
    new_secret = Endpoint.objects.get(pk=endpoint.pk).secret
    assert new_secret != old_secret and new_secret in rotated
    test = client.post(f"{PORTAL}endpoints/{endpoint.pk}/test/")
    assert test.status_code == 302
    delivery = Delivery.objects.filter(endpoint=endpoint).latest("id")
    assert delivery.event.event_type == "pgqueue.test"
    assert delivery.event.application == world["cust_a"]["app"]


def test_portal_disable_is_the_operation_with_the_portals_reason(world, caplog):
    client = login("cust_a")
    endpoint, other = world["cust_a"]["endpoint"], world["cust_b"]["endpoint"]
    with caplog.at_level("INFO", logger="django_pgqueue.operations"):
        client.post(f"{PORTAL}endpoints/{endpoint.pk}/disable/")
    assert f"endpoint disable: changed [{endpoint.pk}]" in caplog.text  # the audit line
    assert Endpoint.objects.get(pk=endpoint.pk).disabled_reason == DISABLED_IN_PORTAL
    assert Endpoint.objects.get(pk=other.pk).is_active
    # Disabled by the breaker before the customer clicked: its reason stays.
    client.post(f"{PORTAL}endpoints/{endpoint.pk}/enable/")
    Endpoint.objects.filter(pk=endpoint.pk).update(is_active=False, disabled_reason="410 Gone")
    client.post(f"{PORTAL}endpoints/{endpoint.pk}/disable/")
    assert Endpoint.objects.get(pk=endpoint.pk).disabled_reason == "410 Gone"


def test_changes_are_posts_only(world):
    client = login("cust_a")
    pk = world["cust_a"]["endpoint"].pk
    for action in ("disable", "enable", "secret", "rotate", "test"):
        assert client.get(f"{PORTAL}endpoints/{pk}/{action}/").status_code == 405


def _urls_for(objects) -> list[tuple[str, str]]:
    """(method, url) of every portal URL that takes an id, with ``objects``' ids."""
    endpoint, delivery = objects["endpoint"].pk, objects["delivery"].pk
    return [
        ("get", f"{PORTAL}endpoints/{endpoint}/"),
        ("get", f"{PORTAL}endpoints/{endpoint}/edit/"),
        ("post", f"{PORTAL}endpoints/{endpoint}/edit/"),
        ("post", f"{PORTAL}endpoints/{endpoint}/disable/"),
        ("post", f"{PORTAL}endpoints/{endpoint}/enable/"),
        ("post", f"{PORTAL}endpoints/{endpoint}/secret/"),
        ("post", f"{PORTAL}endpoints/{endpoint}/rotate/"),
        ("post", f"{PORTAL}endpoints/{endpoint}/test/"),
        ("get", f"{PORTAL}deliveries/{delivery}/"),
        ("post", f"{PORTAL}deliveries/{delivery}/replay/"),
    ]


def test_every_url_with_an_id_is_covered(world):
    covered = {url for _method, url in _urls_for(world["cust_b"])}
    ids = {"endpoint": world["cust_b"]["endpoint"].pk, "delivery": world["cust_b"]["delivery"].pk}
    for pattern in portal_urls.urlpatterns:
        route = str(pattern.pattern)
        if "<int:pk>" in route:
            kind = "delivery" if route.startswith("deliveries") else "endpoint"
            assert PORTAL + route.replace("<int:pk>", str(ids[kind])) in covered, route


def test_another_applications_ids_are_404_and_change_nothing(world):
    client = login("cust_a")
    theirs = world["cust_b"]
    endpoint_before = Endpoint.objects.filter(pk=theirs["endpoint"].pk).values().get()
    secret = theirs["endpoint"].secret
    for method, url in _urls_for(theirs):
        data = {"url": "https://evil.example.com/", "event_types": ""} if "edit" in url else {}
        response = getattr(client, method)(url, data)
        assert response.status_code == 404, (method, url)
        body = response.content.decode()
        assert secret not in body and "private response of cust_b" not in body
        assert "cust_b.example.com" not in body
    assert Endpoint.objects.filter(pk=theirs["endpoint"].pk).values().get() == endpoint_before
    assert Delivery.objects.get(pk=theirs["delivery"].pk).status == "dead"
    assert Delivery.objects.filter(endpoint=theirs["endpoint"]).count() == 1  # no test event


def test_a_form_cannot_move_an_endpoint_to_another_application(world):
    client = login("cust_a")
    mine = world["cust_a"]["endpoint"]
    client.post(
        f"{PORTAL}endpoints/{mine.pk}/edit/",
        {
            "url": mine.url,
            "event_types": "",
            "application": world["cust_b"]["app"].pk,
            "application_id": world["cust_b"]["app"].pk,
        },
    )
    assert Endpoint.objects.get(pk=mine.pk).application == world["cust_a"]["app"]


def test_no_application_or_no_login_is_refused(world):
    # Not logged in: to the login page, as anywhere in Django, and back afterwards.
    response = Client().get(PORTAL)
    assert response.status_code == 302
    assert response["Location"] == f"{settings.LOGIN_URL}?next={PORTAL}"
    assert login("someone_else").get(PORTAL).status_code == 404
    Application.objects.filter(uid="cust_a").update(is_active=False)
    assert login("cust_a").get(PORTAL).status_code == 404


def test_the_permission_hook_can_refuse(world, settings):
    settings.PGQUEUE = {
        **settings.PGQUEUE,
        "WEBHOOKS": {
            **settings.PGQUEUE["WEBHOOKS"],
            "PORTAL_PERMISSION": "tests.portal.test_portal.read_only",
        },
    }
    client = login("cust_a")
    pk = world["cust_a"]["endpoint"].pk
    assert client.get(PORTAL).status_code == 200
    assert client.post(f"{PORTAL}endpoints/{pk}/secret/").status_code == 403
    assert client.post(f"{PORTAL}endpoints/{pk}/disable/").status_code == 403


def read_only(request, application, action):
    return action == "view"


def test_pages_need_no_javascript(world):
    client = login("cust_a")
    pk = world["cust_a"]["endpoint"].pk
    for url in (PORTAL, f"{PORTAL}endpoints/{pk}/", f"{PORTAL}endpoints/new/"):
        assert not re.search(r"<script", client.get(url).content.decode(), re.I)


@pytest.mark.parametrize(
    ("key", "path", "problem"),
    [
        ("PORTAL_APPLICATION", "testproject.demo.portal.missing", "does not import"),
        ("PORTAL_PERMISSION", "django_pgqueue.portal.views.RECENT_DELIVERIES", "not a function"),
        (
            "PORTAL_PERMISSION",
            "tests.support.broken_at_import.hook",
            "does not import (RuntimeError: this module is broken at import)",
        ),
    ],
)
def test_a_portal_hook_that_does_not_import_is_a_system_check_error(settings, key, path, problem):
    from django_pgqueue.checks import check_portal

    settings.PGQUEUE = {
        **settings.PGQUEUE,
        "WEBHOOKS": {**settings.PGQUEUE["WEBHOOKS"], key: path},
    }
    [error] = check_portal()
    assert error.id == "django_pgqueue.E030" and problem in error.msg and key in error.msg


def test_the_shipped_settings_pass_the_portal_check():
    from django_pgqueue.checks import check_portal

    assert check_portal() == []


def test_endpoints_added_and_changed_in_the_portal_are_on_record(world):
    from django.contrib.admin.models import ADDITION, CHANGE, LogEntry

    client = login("cust_a")
    created = client.post(f"{PORTAL}endpoints/new/", {"url": "https://93.184.216.34/new"})
    assert created.status_code == 302
    endpoint = Endpoint.objects.get(url="https://93.184.216.34/new")
    client.post(
        f"{PORTAL}endpoints/{endpoint.pk}/edit/",
        {"url": "https://93.184.216.34/new", "description": "ours"},
    )
    entries = list(LogEntry.objects.filter(object_id=str(endpoint.pk)).order_by("pk"))
    assert [(e.action_flag, e.user.username) for e in entries] == [
        (ADDITION, "cust_a"),
        (CHANGE, "cust_a"),
    ]
    assert entries[0].change_message.startswith("Added. (by portal user 'cust_a'")
    assert entries[1].change_message.startswith("Changed description.")


@pytest.mark.parametrize("column", ["event_types", "channels"])
def test_an_endpoint_whose_lists_hold_no_text_opens_for_editing(world, column):
    """Subscriptions someone wrote by SQL with items that are no text: the edit page
    shows them as JSON, one a line, for the customer to correct (it was a 500)."""
    from django.db import connection

    endpoint = world["cust_a"]["endpoint"]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE pgqueue_endpoint SET {column} = %s::jsonb WHERE id = %s",
            ['[1, {"a": [1]}]', endpoint.pk],
        )
    page = login("cust_a").get(f"{PORTAL}endpoints/{endpoint.pk}/edit/")
    assert page.status_code == 200
    assert "{&quot;a&quot;: [1]}" in page.content.decode()
