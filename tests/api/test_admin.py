"""API keys in the admin: the key is shown once, after creation; the hash never."""

from __future__ import annotations

import re

import pytest
from django.contrib.messages import get_messages

from django_pgqueue.models import ApiKey

from .conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_key_created_in_the_admin_is_shown_once_and_works(admin_client, api_conf, tenants):
    response = admin_client.post(
        "/admin/django_pgqueue/apikey/add/",
        {"name": "ops", "scopes": ["read"], "application": tenants["a"].pk, "rate_limit": ""},
    )
    assert response.status_code == 302, response.content[:2000]
    shown = " ".join(str(m) for m in get_messages(response.wsgi_request))
    key = re.search(r"pgq_[0-9a-f]{12}_\S+", shown).group(0)
    stored = ApiKey.objects.get()
    assert stored.scopes == ["read"] and stored.application == tenants["a"]
    assert ApiClient(key).get("applications").json()["data"][0]["uid"] == "cust_a"
    # The page after "Save" shows the key (the message); no later page does.
    assert key.encode() in admin_client.get(response["Location"]).content
    page = admin_client.get(f"/admin/django_pgqueue/apikey/{stored.pk}/change/")
    assert page.status_code == 200
    assert key.encode() not in page.content and stored.key_hash.encode() not in page.content
    listing = admin_client.get("/admin/django_pgqueue/apikey/")
    assert f"pgq_{stored.prefix}_".encode() in listing.content


def test_the_admin_form_offers_the_secrets_scope(admin_client, api_conf, tenants):
    page = admin_client.get("/admin/django_pgqueue/apikey/add/")
    assert b'value="secrets"' in page.content
    response = admin_client.post(
        "/admin/django_pgqueue/apikey/add/",
        {"name": "rotator", "scopes": ["manage", "secrets"], "application": "", "rate_limit": ""},
    )
    assert response.status_code == 302, response.content[:2000]
    assert ApiKey.objects.get().scopes == ["manage", "secrets"]


def test_keys_are_revoked_by_the_admin_action(admin_client, api, tenants):
    client, kept = api("read"), api("read")
    first, second = ApiKey.objects.order_by("pk")
    response = admin_client.post(
        "/admin/django_pgqueue/apikey/",
        {"action": "revoke", "_selected_action": [first.pk]},
        follow=True,
    )
    assert "Revoked 1 key(s)." in response.content.decode()
    revoked_at = ApiKey.objects.get(pk=first.pk).revoked_at
    assert revoked_at is not None and ApiKey.objects.get(pk=second.pk).revoked_at is None
    assert client.get("applications").status_code == 401
    assert kept.get("applications").status_code == 200
    # Revoking again changes nothing: the first revocation's time stays.
    response = admin_client.post(
        "/admin/django_pgqueue/apikey/",
        {"action": "revoke", "_selected_action": [first.pk, second.pk]},
        follow=True,
    )
    assert "Revoked 1 key(s)." in response.content.decode()
    assert ApiKey.objects.get(pk=first.pk).revoked_at == revoked_at


def test_a_key_needs_a_scope(admin_client, tenants):
    response = admin_client.post("/admin/django_pgqueue/apikey/add/", {"name": "none"})
    assert response.status_code == 200 and not ApiKey.objects.exists()


def test_the_admin_form_keeps_the_operators_scopes_off_a_key_of_an_application(
    admin_client, api_conf, tenants
):
    add = "/admin/django_pgqueue/apikey/add/"
    for scopes in (["read", "jobs"], ["queues"]):
        data = {"name": "c", "scopes": scopes, "application": tenants["a"].pk, "rate_limit": ""}
        response = admin_client.post(add, data)
        assert response.status_code == 200 and not ApiKey.objects.exists()
        assert b"scope is for operators only" in response.content, scopes
    response = admin_client.post(
        add, {"name": "ops", "scopes": ["jobs", "queues"], "application": "", "rate_limit": ""}
    )
    assert response.status_code == 302, response.content[:2000]
    assert ApiKey.objects.get().scopes == ["jobs", "queues"]


def test_a_key_with_malformed_stored_scopes_is_shown_and_mended_in_the_admin(admin_client, tenants):
    """A key row whose scopes someone wrote by SQL as no list at all: its pages and
    the list still render, and saving the form replaces the scopes, as for any key."""
    from django.db import connection

    from django_pgqueue.api.keys import create_key

    key = create_key("k", ["send"])
    with connection.cursor() as cursor:
        cursor.execute("UPDATE pgqueue_api_key SET scopes = '42'::jsonb")
    assert admin_client.get("/admin/django_pgqueue/apikey/").status_code == 200
    page = f"/admin/django_pgqueue/apikey/{key.api_key.pk}/change/"
    assert admin_client.get(page).status_code == 200
    response = admin_client.post(page, {"name": "k", "scopes": ["read"], "rate_limit": ""})
    assert response.status_code == 302, response.content[:2000]
    assert ApiKey.objects.get().scopes == ["read"]
