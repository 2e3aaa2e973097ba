"""Broker destinations in the customer portal: ``PORTAL_DESTINATIONS`` decides which
schemes a customer may type, the URL is checked by the endpoint's own rule (the one
the admin and the API use), and a broker URL's password never comes back: not in a
page, not in an error, not in a log line."""

from __future__ import annotations

import html
import re
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_pgqueue.models import Application, Endpoint
from django_pgqueue.webhooks.brokers.urls import open_password

pytestmark = pytest.mark.django_db

PORTAL = "/webhooks/"
PASSWORD = "pw-Zq81xK"  # nowhere else in a page: a hit is the password
AMQP = f"amqp://pub:{PASSWORD}@127.0.0.1:5672/%2F?exchange=orders&routing_key=k"
NATS = f"nats://pub:{PASSWORD}@127.0.0.1:4222?subject=orders.paid"


def configure(settings: Any, destinations: list[str] | None = None) -> None:
    webhooks = {
        **settings.PGQUEUE["WEBHOOKS"],
        "ALLOW_NETWORKS": ["127.0.0.0/8"],
        "ALLOW_HTTP": False,
        "PORTAL_APPLICATION": "testproject.demo.portal.current_application",
    }
    if destinations is not None:
        webhooks["PORTAL_DESTINATIONS"] = destinations
    settings.PGQUEUE = {**settings.PGQUEUE, "WEBHOOKS": webhooks}


@pytest.fixture
def client(settings: Any) -> Client:
    """Customer ``cust_a``, logged in, brokers allowed in the portal."""
    configure(settings, ["https", "amqp", "nats"])
    Application.objects.create(uid="cust_a")
    client = Client()
    client.force_login(User.objects.get_or_create(username="cust_a")[0])
    return client


def stored_password(endpoint: Endpoint) -> str:
    stored = Endpoint.objects.values_list("url", flat=True).get(pk=endpoint.pk)
    return open_password(urlsplit(stored).password or "", what="the test endpoint")


def url_in_form(body: str) -> str:
    """The value of the form's URL input, as the browser would send it back."""
    [tag] = re.findall(r'<input[^>]*name="url"[^>]*>', body)
    return html.unescape(re.search(r'value="([^"]*)"', tag).group(1))


@pytest.mark.parametrize("url", [AMQP, NATS], ids=["amqp", "nats"])
def test_a_customer_adds_and_edits_a_broker_endpoint_and_never_sees_its_password(
    client, url, caplog
):
    with caplog.at_level("DEBUG"):
        created = client.post(f"{PORTAL}endpoints/new/", {"url": url, "event_types": "order.*"})
    assert created.status_code == 302, created.context["form"].errors
    endpoint = Endpoint.objects.get(application__uid="cust_a")
    assert PASSWORD not in endpoint.url  # stored encrypted
    assert stored_password(endpoint) == PASSWORD
    bodies = [created.content.decode()]
    for page in ("", f"endpoints/{endpoint.pk}/", f"endpoints/{endpoint.pk}/edit/"):
        response = client.get(PORTAL + page)
        assert response.status_code == 200
        bodies.append(response.content.decode())
    form_page = bodies[-1]
    shown = url_in_form(form_page)
    assert shown == url.replace(PASSWORD, "***")
    assert "~sealed~" not in "".join(bodies)  # nor its ciphertext
    # Edited without retyping the password: the stored one is kept.
    edited = client.post(
        f"{PORTAL}endpoints/{endpoint.pk}/edit/",
        {"url": shown, "description": "ours", "event_types": "order.*"},
    )
    assert edited.status_code == 302, edited.context["form"].errors
    endpoint.refresh_from_db()
    assert endpoint.description == "ours" and stored_password(endpoint) == PASSWORD
    bodies.append(client.get(f"{PORTAL}endpoints/{endpoint.pk}/").content.decode())
    # A new password typed in the form replaces it.
    client.post(
        f"{PORTAL}endpoints/{endpoint.pk}/edit/",
        {"url": url.replace(PASSWORD, "new-pw"), "event_types": "order.*"},
    )
    assert stored_password(Endpoint.objects.get(pk=endpoint.pk)) == "new-pw"
    for body in bodies:
        assert PASSWORD not in body
    assert PASSWORD not in caplog.text
    from django.contrib.admin.models import LogEntry

    for entry in LogEntry.objects.filter(object_id=str(endpoint.pk)):
        assert PASSWORD not in entry.object_repr + entry.change_message


def test_a_scheme_not_in_portal_destinations_is_refused_in_words(settings):
    configure(settings)  # the default: https only
    Application.objects.create(uid="cust_a")
    client = Client()
    client.force_login(User.objects.get_or_create(username="cust_a")[0])
    refused = client.post(f"{PORTAL}endpoints/new/", {"url": AMQP})
    assert refused.status_code == 200
    body = refused.content.decode()
    assert "amqp:// addresses are not accepted here" in html.unescape(body)
    assert "https://" in html.unescape(body)
    assert PASSWORD not in body
    assert not Endpoint.objects.exists()
    configure(settings, ["https", "nats"])
    refused = client.post(f"{PORTAL}endpoints/new/", {"url": AMQP})
    message = html.unescape(refused.content.decode())
    assert "amqp:// addresses are not accepted here" in message
    assert "https:// or nats://" in message
    assert client.post(f"{PORTAL}endpoints/new/", {"url": NATS}).status_code == 302
    # http too is a destination the project opens, on top of ALLOW_HTTP.
    refused = client.post(f"{PORTAL}endpoints/new/", {"url": "http://93.184.216.34/hook"})
    assert "http:// addresses are not accepted here" in html.unescape(refused.content.decode())


def test_a_refused_broker_url_keeps_its_password_out_of_the_page_and_the_logs(client, caplog):
    # 10.0.0.0/8 is not in ALLOW_NETWORKS: the endpoint's own rule refuses it.
    private = AMQP.replace("127.0.0.1", "10.1.2.3")
    with caplog.at_level("DEBUG"):
        refused = client.post(f"{PORTAL}endpoints/new/", {"url": private})
    body = refused.content.decode()
    assert refused.status_code == 200 and "This URL cannot receive webhooks" in body
    assert "refused at save time" in caplog.text  # the refusal is logged, masked
    assert PASSWORD not in body and PASSWORD not in caplog.text
    # Refused for another field: the URL is shown back masked, never as typed.
    other = client.post(f"{PORTAL}endpoints/new/", {"url": AMQP, "event_types": "order*"})
    body = other.content.decode()
    assert "is not an event type" in body and PASSWORD not in body
    assert url_in_form(body) == AMQP.replace(PASSWORD, "***")
    # Sent back as shown, a new endpoint has no password to keep: it must be typed.
    masked = client.post(f"{PORTAL}endpoints/new/", {"url": url_in_form(body)})
    assert masked.status_code == 200
    assert "write it again" in masked.content.decode()
    assert not Endpoint.objects.exists()


def test_a_masked_password_is_not_sent_to_another_host(client):
    client.post(f"{PORTAL}endpoints/new/", {"url": NATS})
    endpoint = Endpoint.objects.get()
    moved = NATS.replace(PASSWORD, "***").replace("127.0.0.1", "127.0.0.2")
    refused = client.post(f"{PORTAL}endpoints/{endpoint.pk}/edit/", {"url": moved})
    assert refused.status_code == 200
    body = refused.content.decode()
    assert "write it again" in body and PASSWORD not in body
    assert Endpoint.objects.values_list("url", flat=True).get() == endpoint.url


def test_an_unchanged_masked_url_is_not_recorded_as_a_change(client):
    from django.contrib.admin.models import CHANGE, LogEntry

    client.post(f"{PORTAL}endpoints/new/", {"url": AMQP})
    endpoint = Endpoint.objects.get()
    shown = url_in_form(client.get(f"{PORTAL}endpoints/{endpoint.pk}/edit/").content.decode())
    client.post(f"{PORTAL}endpoints/{endpoint.pk}/edit/", {"url": shown, "description": "d"})
    entry = LogEntry.objects.get(object_id=str(endpoint.pk), action_flag=CHANGE)
    assert entry.change_message.startswith("Changed description.")


def test_a_refused_form_asks_for_a_typed_password_again(client):
    # The page shows it masked, and on an edit *** keeps the stored password: without
    # a word, the customer's new password would be silently dropped.
    client.post(f"{PORTAL}endpoints/new/", {"url": AMQP})
    endpoint = Endpoint.objects.get()
    typed = AMQP.replace(PASSWORD, "brand-new-pw")
    refused = client.post(
        f"{PORTAL}endpoints/{endpoint.pk}/edit/", {"url": typed, "event_types": "order*"}
    )
    body = html.unescape(refused.content.decode())
    assert "Type the password again" in body and "brand-new-pw" not in body
    assert stored_password(Endpoint.objects.get()) == PASSWORD
    # Kept as ***, nothing to type again.
    kept = client.post(
        f"{PORTAL}endpoints/{endpoint.pk}/edit/",
        {"url": AMQP.replace(PASSWORD, "***"), "event_types": "order*"},
    )
    assert "Type the password again" not in html.unescape(kept.content.decode())


def test_http_opened_to_customers_without_allow_http_is_a_warning(settings):
    from django_pgqueue.checks import check_portal

    configure(settings, ["https", "http"])
    [warning] = check_portal()
    assert warning.id == "django_pgqueue.W031"
    assert "holds 'http'" in warning.msg and "['ALLOW_HTTP'] is False" in warning.msg
    webhooks = {**settings.PGQUEUE["WEBHOOKS"], "ALLOW_HTTP": True}
    settings.PGQUEUE = {**settings.PGQUEUE, "WEBHOOKS": webhooks}
    assert check_portal() == []


def test_a_broker_opened_to_customers_without_its_client_is_a_warning(settings, monkeypatch):
    import importlib.util

    from django_pgqueue.checks import check_portal

    configure(settings, ["https", "amqp", "nats"])
    assert check_portal() == []  # the broker extra is installed here
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pika" else find_spec(name)
    )
    [warning] = check_portal()
    assert warning.id == "django_pgqueue.W031"
    assert "holds 'amqp'" in warning.msg and "install the 'brokers' extra" in warning.msg
