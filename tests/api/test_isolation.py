"""Every route, for a key scoped to one application, a key without the route's scope
and a key without any key at all: nobody sees or changes what is not theirs."""

from __future__ import annotations

import json

import pytest
from django.urls import URLPattern

from django_pgqueue.api import urls
from django_pgqueue.api.keys import CUSTOMER_SCOPES, SCOPES
from django_pgqueue.api.openapi import build_document
from django_pgqueue.models import Application, Delivery, Endpoint, Queue, Status

from .conftest import ApiClient, problem_of

pytestmark = pytest.mark.django_db(transaction=True)

#: Every operation: (method, path, scope, body). ``{ep}``, ``{dlv}`` and ``{app}`` are
#: filled with the other application's objects.
ROUTES = [
    ("post", "events", "send", {"event_type": "b.secret", "payload": {}, "application": "cust_b"}),
    (
        "post",
        "events/batch",
        "send",
        {"events": [{"event_type": "b.secret", "payload": {}, "application": "cust_b"}]},
    ),
    ("get", "endpoints", "read", None),
    ("post", "endpoints", "manage", {"url": "https://127.0.0.1:9/new", "application": "cust_b"}),
    ("get", "endpoints/{ep}", "read", None),
    ("patch", "endpoints/{ep}", "manage", {"description": "taken"}),
    ("delete", "endpoints/{ep}", "manage", None),
    ("post", "endpoints/{ep}/rotate-secret", "secrets", None),
    ("post", "endpoints/{ep}/enable", "manage", None),
    ("post", "endpoints/{ep}/disable", "manage", None),
    ("post", "endpoints/{ep}/test", "manage", None),
    ("post", "endpoints/{ep}/replay", "manage", {"since": "2000-01-01T00:00:00Z"}),
    ("get", "deliveries", "read", None),
    ("post", "deliveries/replay", "manage", {"ids": ["{dlv}"]}),
    ("get", "deliveries/{dlv}", "read", None),
    ("post", "deliveries/{dlv}/replay", "manage", None),
    ("get", "event-types", "read", None),
    ("get", "applications", "read", None),
    ("post", "applications", "manage", {"uid": "cust_c"}),
    ("get", "applications/{app}", "read", None),
    ("patch", "applications/{app}", "manage", {"name": "taken"}),
    ("delete", "applications/{app}", "manage", None),
    # The job queues: the fleet's, so a key of an application reaches none of them.
    ("get", "queues", "queues", None),
    ("get", "queues/{name}", "queues", None),
    ("put", "queues/{name}", "queues", {"concurrency": 1}),
    ("post", "queues/{name}/reset", "queues", None),
    ("post", "queues/{name}/pause", "queues", None),
    ("post", "queues/{name}/resume", "queues", None),
    # A job: the fleet's too, of no application.
    ("get", "jobs/{job}", "jobs", None),
]


def test_the_route_table_covers_every_documented_operation_and_url():
    documented = {
        (method, path.lstrip("/").replace("{id}", "{x}").replace("{uid}", "{x}"))
        for path, item in build_document()["paths"].items()
        for method in item
    }
    tested = {
        (
            m,
            p.replace("{ep}", "{x}")
            .replace("{dlv}", "{x}")
            .replace("{app}", "{x}")
            .replace("{job}", "{x}"),
        )
        for m, p, _, _ in ROUTES
    }
    assert tested == documented
    patterns = {
        str(p.pattern)
        for p in urls.urlpatterns
        if isinstance(p, URLPattern) and p.name != "no_such_route"  # the 404 fallback
    }
    routed = {
        p.replace("<str:pk>", "{x}").replace("<path:uid>", "{x}").replace("<str:name>", "{name}")
        for p in patterns
    } - {"openapi.json"}
    assert routed == {p for _, p in documented}


def _fill(value, world):
    text = json.dumps(value) if value is not None else None
    if text is not None:
        text = text.replace('"{dlv}"', str(world["dlv_b"].pk))
        return json.loads(text)
    return None


def _path(path, world):
    return (
        path.replace("{ep}", str(world["ep_b"].pk))
        .replace("{dlv}", str(world["dlv_b"].pk))
        .replace("{app}", "cust_b")
        .replace("{name}", "reports")
        .replace("{job}", str(world["job"]))
    )


def _snapshot():
    return (
        sorted(
            Endpoint.objects.values_list(
                "pk", "url", "description", "is_active", "secret_ciphertext"
            )
        ),
        sorted(Delivery.objects.values_list("pk", "status")),
        sorted(Application.objects.values_list("uid", "name")),
        sorted(Queue.objects.values_list("name", "concurrency", "paused_at")),
    )


@pytest.mark.parametrize(("method", "path", "scope", "body"), ROUTES)
def test_a_key_of_one_application_never_reaches_another(api, world, method, path, scope, body):
    client = api(*CUSTOMER_SCOPES, application="cust_a")
    before = _snapshot()
    response = client.call(method, _path(path, world), _fill(body, world))
    if "{app}" in path:
        # Another application's uid is answered exactly as a uid that does not exist.
        missing = client.call(method, path.replace("{app}", "nobody"), _fill(body, world))
        assert response.status_code == missing.status_code
        assert response.json()["detail"] == missing.json()["detail"].replace("nobody", "cust_b")
    else:
        assert b"cust_b" not in response.content
    assert b"b.secret" not in response.content
    assert str(world["ep_b"].url).encode() not in response.content
    assert b"testproject" not in response.content  # no job's task
    if "{" in path or path == "queues" or (method != "get" and path != "deliveries/replay"):
        assert response.status_code in (403, 404), response.content
        problem_of(response, response.status_code)
    else:
        assert response.status_code == 200, response.content
        if path == "deliveries/replay":
            assert response.json() == {
                "changed": [],
                "skipped": {str(world["dlv_b"].pk): "not found"},
            }
    assert _snapshot()[0] == before[0] and _snapshot()[2:] == before[2:]
    assert dict(_snapshot()[1])[world["dlv_b"].pk] == Status.DEAD


def test_lists_of_a_scoped_key_hold_its_own_objects(api, world):
    client = api("read", application="cust_a")
    assert [e["id"] for e in client.get("endpoints").json()["data"]] == [world["ep_a"].pk]
    assert [d["id"] for d in client.get("deliveries").json()["data"]] == [world["dlv_a"].pk]
    assert [a["uid"] for a in client.get("applications").json()["data"]] == ["cust_a"]
    assert [t["name"] for t in client.get("event-types").json()["data"]] == ["a.order"]
    # The application filter narrows; it never widens.
    assert client.get("deliveries", application="cust_b").json()["data"] == []


@pytest.mark.parametrize(("method", "path", "scope", "body"), ROUTES)
def test_a_key_without_the_scope_is_refused(api, world, method, path, scope, body):
    others = [s for s in SCOPES if s != scope]
    client = api(*others)
    before = _snapshot()
    response = client.call(method, _path(path, world), _fill(body, world))
    assert problem_of(response, 403)["code"] == "forbidden"
    assert _snapshot() == before


@pytest.mark.parametrize(("method", "path", "scope", "body"), ROUTES)
def test_no_key_is_a_401_everywhere(api, world, method, path, scope, body):
    response = ApiClient(None).call(method, _path(path, world), _fill(body, world))
    problem_of(response, 401)


def test_the_scopes_are_send_read_manage_secrets_queues_and_jobs():
    assert set(SCOPES) == {"send", "read", "manage", "secrets", "queues", "jobs"}
    assert {scope for _, _, scope, _ in ROUTES} == set(SCOPES)
    assert set(CUSTOMER_SCOPES) == {"send", "read", "manage", "secrets"}


def test_rotating_a_secret_needs_the_secrets_scope_manage_is_not_enough(api, world):
    endpoint = world["ep_a"]
    for scopes in (("manage",), ("send", "read", "manage")):
        problem_of(api(*scopes).post(f"endpoints/{endpoint.pk}/rotate-secret"), 403)
    endpoint.refresh_from_db()
    assert endpoint.previous_secrets == []
    # ``secrets`` alone suffices: rotating is its own privilege, not a kind of managing.
    rotated = api("secrets").post(f"endpoints/{endpoint.pk}/rotate-secret")
    assert rotated.status_code == 200, rotated.content
    endpoint.refresh_from_db()
    assert rotated.json()["secret"] == endpoint.secret


def test_a_send_key_cannot_read_secrets_or_deliveries(api, world):
    client = api("send")
    for path in ("endpoints", f"endpoints/{world['ep_a'].pk}", "deliveries"):
        problem_of(client.get(path), 403)
    problem_of(client.post(f"endpoints/{world['ep_a'].pk}/rotate-secret"), 403)
