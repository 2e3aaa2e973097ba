"""One authority model at every door: an inactive application's keys are refused,
customers never change operator-owned fields, a key never grants more than its
creator holds, and every URL value is parsed strictly before SQL."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages

from django_pgqueue.models import ApiKey, Application, Endpoint

from .conftest import problem_of

pytestmark = pytest.mark.django_db(transaction=True)


# -- an inactive application is inactive for its keys ----------------------------------


def test_a_customer_key_cannot_reactivate_its_application(api, tenants):
    Application.objects.filter(uid="cust_b").update(is_active=False, metadata={"plan": "gold"})
    manage = api("manage", "read", application="cust_b")
    body = problem_of(manage.patch("applications/cust_b", {"is_active": True}), 403)
    assert "inactive" in body["detail"]
    body = problem_of(manage.patch("applications/cust_b", {"metadata": {"plan": "free"}}), 403)
    assert "inactive" in body["detail"]
    b = Application.objects.get(uid="cust_b")
    assert b.is_active is False and b.metadata == {"plan": "gold"}


def test_the_keys_of_an_inactive_application_are_refused_everywhere(api, tenants):
    every = api(application="cust_b")
    Application.objects.filter(uid="cust_b").update(is_active=False)
    for method, path, body in [
        ("get", "endpoints", None),
        ("get", "deliveries", None),
        ("get", "applications/cust_b", None),
        ("post", "events", {"event_type": "b.x", "payload": {}}),
        ("post", f"endpoints/{tenants['ep_b'].pk}/rotate-secret", None),
        ("post", f"endpoints/{tenants['ep_b'].pk}/disable", None),
    ]:
        response = every.call(method, path, body)
        problem = problem_of(response, 403)
        assert "cust_b" in problem["detail"] and "inactive" in problem["detail"], path
    assert Endpoint.objects.get(pk=tenants["ep_b"].pk).is_active
    # Active again, the same key works again.
    Application.objects.filter(uid="cust_b").update(is_active=True)
    assert every.get("endpoints").status_code == 200


# -- fields owned by the operator --------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [("is_active", False), ("metadata", {"plan": "free"})],
)
def test_a_customer_key_cannot_change_operator_fields_of_its_application(
    api, tenants, field, value
):
    Application.objects.filter(uid="cust_b").update(metadata={"plan": "gold"})
    manage = api("manage", application="cust_b")
    body = problem_of(manage.patch("applications/cust_b", {field: value}), 403)
    assert field in body["detail"] and body["errors"] == {field: [body["errors"][field][0]]}
    b = Application.objects.get(uid="cust_b")
    assert b.is_active is True and b.metadata == {"plan": "gold"}
    # Its own field, and the operator's fields sent back unchanged, are accepted.
    ok = manage.patch("applications/cust_b", {"name": "Bee", "is_active": True})
    assert ok.status_code == 200, ok.content
    assert Application.objects.get(uid="cust_b").name == "Bee"


@pytest.mark.parametrize(
    "field, value", [("max_in_flight", 500), ("rate_limit", 10_000), ("rate_period", 3600)]
)
def test_a_customer_key_cannot_set_endpoint_limits(api, tenants, field, value):
    manage = api("manage", application="cust_b")
    ep = tenants["ep_b"]
    body = problem_of(manage.patch(f"endpoints/{ep.pk}", {field: value}), 403)
    assert field in body["detail"]
    body = problem_of(manage.post("endpoints", {"url": "https://127.0.0.1:9/n", field: value}), 403)
    assert field in body["detail"]
    assert Endpoint.objects.filter(application=tenants["b"]).count() == 1
    # An operator's key (bound to no application) sets them.
    operator = api("manage")
    assert operator.patch(f"endpoints/{ep.pk}", {field: value}).status_code == 200


def test_the_portal_form_offers_no_operator_field():
    from django_pgqueue.authority import OPERATOR_FIELDS
    from django_pgqueue.portal.forms import EndpointForm

    assert not set(EndpointForm.base_fields) & set(OPERATOR_FIELDS[Endpoint])


# -- a key never grants more than its creator holds -------------------------------------


def _staff(*codenames: str) -> User:
    user = User.objects.create_user("keymaker", password="x", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return User.objects.get(pk=user.pk)


def test_a_staff_user_cannot_create_a_key_with_scopes_beyond_their_permissions(
    client, api_conf, tenants
):
    client.force_login(_staff("add_apikey", "view_apikey", "change_apikey"))
    response = client.post(
        "/admin/django_pgqueue/apikey/add/",
        {"name": "all", "scopes": ["send", "read", "manage", "secrets"], "application": ""},
    )
    assert response.status_code == 200
    text = response.content.decode()
    assert "secrets" in text and "manage_endpoint_secret" in text
    assert not ApiKey.objects.exists()


def test_a_staff_user_may_create_a_key_within_their_permissions(client, api_conf, tenants):
    client.force_login(
        _staff("add_apikey", "view_apikey", "view_endpoint", "view_delivery", "view_application")
    )
    response = client.post(
        "/admin/django_pgqueue/apikey/add/",
        {"name": "reader", "scopes": ["read"], "application": tenants["a"].pk, "rate_limit": ""},
    )
    assert response.status_code == 302, response.content[:3000]
    shown = " ".join(str(m) for m in get_messages(response.wsgi_request))
    assert "pgq_" in shown and ApiKey.objects.get().scopes == ["read"]


def test_a_staff_user_cannot_widen_an_existing_key(client, api, tenants):
    api("read", application="cust_a")
    key = ApiKey.objects.get()
    client.force_login(
        _staff("change_apikey", "view_apikey", "view_endpoint", "view_delivery", "view_application")
    )
    response = client.post(
        f"/admin/django_pgqueue/apikey/{key.pk}/change/",
        {"name": "x", "scopes": ["read", "secrets"], "application": tenants["a"].pk},
    )
    assert response.status_code == 200 and "secrets" in response.content.decode()
    assert ApiKey.objects.get().scopes == ["read"]


# -- strict parsing of URL values --------------------------------------------------------


@pytest.mark.parametrize(
    "path, query, name",
    [
        ("endpoints", {"application": "cust\x00a"}, "application"),
        ("deliveries", {"application": "cust\x00a"}, "application"),
        ("endpoints", {"limit": "²"}, "limit"),
        ("deliveries", {"endpoint": "²"}, "endpoint"),
        ("deliveries", {"endpoint": "99999999999999999999"}, "endpoint"),
        ("deliveries", {"limit": "\u0661\u0660"}, "limit"),
        # A cursor this API never gave out: "id:" and Arabic-Indic digits, or past bigint.
        ("deliveries", {"cursor": "aWQ62aHZoA"}, "cursor"),
        ("deliveries", {"cursor": "aWQ6OTk5OTk5OTk5OTk5OTk5OTk5OTk5"}, "cursor"),
    ],
)
def test_bad_query_values_are_a_400_naming_the_parameter(api, tenants, path, query, name):
    body = problem_of(api().get(path, **query), 400)
    assert name in body["detail"]


def test_a_nul_in_an_application_uid_is_a_4xx(api, tenants):
    response = api().get("applications/cust%00a")
    assert response.status_code in (400, 404), response.content
    assert response["Content-Type"] == "application/problem+json"


@pytest.mark.parametrize("pk", ["²", "\uff11", "9" * 30])
def test_odd_path_ids_are_a_404(api, tenants, pk):
    problem_of(api().get(f"endpoints/{pk}"), 404)


def test_create_key_for_a_creator_grants_no_more_than_they_hold(api_conf, tenants):
    from django_pgqueue.api.keys import create_key

    reader = _staff("view_endpoint", "view_delivery", "view_application")
    with pytest.raises(ValueError, match=r"'secrets' scope needs django_pgqueue\.manage_endpoint"):
        create_key("x", ["read", "secrets"], creator=reader)
    assert not ApiKey.objects.exists()
    assert create_key("x", ["read"], creator=reader).api_key.scopes == ["read"]
    # Without a creator (the shell's command) any key is made.
    assert create_key("y", ["secrets"]).api_key.scopes == ["secrets"]


def test_the_command_refuses_a_nul_in_the_application_or_the_name(api_conf, tenants):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="name contains a NUL"):
        call_command("pgqueue_api_key", "create", "--name", "x\x00", "--scope", "read")
    with pytest.raises(CommandError, match="prefix contains a NUL"):
        call_command("pgqueue_api_key", "revoke", "pgq_\x00")
    with pytest.raises(CommandError, match="NUL"):
        call_command(
            "pgqueue_api_key",
            "create",
            "--name",
            "x",
            "--scope",
            "read",
            "--application",
            "cust\x00a",
        )
    assert not ApiKey.objects.exists()


def test_portal_ids_past_bigint_are_a_404(settings, api_conf, tenants):
    settings.PGQUEUE = {
        **settings.PGQUEUE,
        "WEBHOOKS": {
            **settings.PGQUEUE["WEBHOOKS"],
            "PORTAL_APPLICATION": "testproject.demo.portal.current_application",
        },
    }
    from django.test import Client

    client = Client()
    client.force_login(User.objects.create_user("cust_a"))
    for path in ("endpoints/99999999999999999999/", "deliveries/99999999999999999999/"):
        assert client.get("/webhooks/" + path).status_code == 404
    assert client.post("/webhooks/endpoints/99999999999999999999/disable/").status_code == 404


def test_an_operator_key_sending_for_an_inactive_application_writes_nothing(api, tenants):
    from django_pgqueue.models import Event

    Application.objects.filter(uid="cust_b").update(is_active=False)
    response = api("send").post(
        "events", {"event_type": "b.x", "payload": {}, "application": "cust_b"}
    )
    body = problem_of(response, 422)
    assert "application" in body["errors"] and not Event.objects.exists()
