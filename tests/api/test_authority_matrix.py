"""Operations x actors: each actor may apply each operation exactly when the
operation's declaration (operations.py: permission, scope, customer) says so, in
``authority.authorize`` and at each door that offers it (the HTTP API's routes and
the portal's views that name an operation). The matrix is built from the
declarations and the URLconfs, so a new operation or door is covered by being
declared."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import URLPattern

from django_pgqueue import authority
from django_pgqueue.api import urls as api_urls
from django_pgqueue.api.http import Principal
from django_pgqueue.api.keys import create_key
from django_pgqueue.authority import Customer, Operator
from django_pgqueue.models import Application, Delivery, Endpoint, Status
from django_pgqueue.operations import OPERATIONS
from django_pgqueue.portal import urls as portal_urls
from django_pgqueue.webhooks.fanout import send_event

from .conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)

ALL_OPERATIONS = [op for ops in OPERATIONS.values() for op in ops.values()]


def _op_id(op: Any) -> str:
    return f"{op.kind}.{op.name}"


def _user(name: str, *codenames: str) -> User:
    user = User.objects.create_user(name)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return User.objects.get(pk=user.pk)  # a fresh permission cache


def _allowed(actor: Any, op: Any, application_id: int | None) -> bool:
    try:
        authority.authorize(actor, op, application_id)
    except authority.Refused:
        return False
    return True


@pytest.mark.parametrize("op", ALL_OPERATIONS, ids=_op_id)
def test_authorize_follows_each_declaration(op, transactional_db):
    a = Application.objects.create(uid="cust_a")
    b = Application.objects.create(uid="cust_b")
    off = Application.objects.create(uid="cust_off", is_active=False)
    every = frozenset(authority.SCOPE_PERMISSIONS)
    others = every - {op.scope}

    def key(app: Application | None, scopes: frozenset[str]) -> Principal:
        return Principal(
            1,
            scopes,
            app.pk if app else None,
            app.uid if app else None,
            app.is_active if app else True,
        )

    keyed = op.scope is not None
    # A fleet's object (a job queue) is no application's: only the operator's keys.
    app_keyed = keyed and not op.fleet
    cases = [
        ("operator with the permission", Operator(_user("p", op.permission)), a.pk, True),
        ("operator without it", Operator(_user("n")), a.pk, False),
        ("key with the scope", key(a, every), a.pk, app_keyed),
        ("key without the scope", key(a, others), a.pk, False),
        ("operator's key (no application)", key(None, every), a.pk, keyed),
        ("key of another application", key(b, every), a.pk, False),
        ("key of an inactive application", key(off, every), off.pk, False),
        ("portal customer", Customer(a, _user("ca")), a.pk, op.customer),
        ("another customer", Customer(b, _user("cb")), a.pk, False),
        ("customer of an inactive application", Customer(off, _user("co")), off.pk, False),
    ]
    wrong = [
        (name, expected)
        for name, actor, app_id, expected in cases
        if _allowed(actor, op, app_id) is not expected
    ]
    assert not wrong, f"{_op_id(op)}: {wrong}"


# -- the doors ---------------------------------------------------------------------------


def _doors(patterns: list[Any], attribute: str) -> list[tuple[str, str, Any]]:
    """(route, method, operation) of every URL whose view names an operation."""
    found = []
    for pattern in patterns:
        assert isinstance(pattern, URLPattern)
        declared = getattr(pattern.callback, attribute, None)
        if declared is None:
            continue
        items = declared.items() if isinstance(declared, dict) else [("POST", declared)]
        found += [(str(pattern.pattern), method, op) for method, op in items]
    return found


API_DOORS = [door for door in _doors(api_urls.urlpatterns, "operations") if not door[2].fleet]
#: The doors onto the fleet's objects (the job queues): the operator's keys' alone.
FLEET_DOORS = [door for door in _doors(api_urls.urlpatterns, "operations") if door[2].fleet]
PORTAL_DOORS = _doors(portal_urls.urlpatterns, "operation")


def test_the_fleet_doors_are_found():
    assert {_op_id(op) for _, _, op in FLEET_DOORS} == {
        "queue.view",
        "queue.configure",
        "queue.reset",
        "queue.pause",
        "queue.resume",
        "job.view",
    }


def test_the_fleet_doors_need_the_operators_scopes_and_nothing_else_does():
    """``Operation.fleet`` and ``authority.OPERATOR_SCOPES`` state one rule from its two
    sides (the object, the key): they must agree."""
    declared = [*ALL_OPERATIONS, *(op for _, _, op in FLEET_DOORS)]
    assert {op.scope for op in declared if op.fleet} == authority.OPERATOR_SCOPES
    assert not [op for op in declared if not op.fleet and op.scope in authority.OPERATOR_SCOPES]


def _customer_scopes() -> tuple[str, ...]:
    return tuple(s for s in authority.SCOPE_PERMISSIONS if s not in authority.OPERATOR_SCOPES)


def _bound(new: Any, uid: str) -> Any:
    """An operator's key bound to application ``uid`` after it was made (as the admin's
    form once allowed): it holds the operator's scopes, and must still be refused."""
    from django_pgqueue.models import ApiKey

    ApiKey.objects.filter(pk=new.api_key.pk).update(application=Application.objects.get(uid=uid))
    return new


@pytest.mark.parametrize(
    "route, method, op", FLEET_DOORS, ids=[f"{m} {r}" for r, m, _ in FLEET_DOORS]
)
def test_each_fleet_door_allows_only_the_operators_keys(objects, route, method, op):
    from django_pgqueue import queues
    from testproject.demo import tasks

    every = tuple(authority.SCOPE_PERMISSIONS)
    others = tuple(s for s in every if s != op.scope)
    job = tasks.add.enqueue(1, 2).id
    path = route.replace("<str:name>", "reports").replace("<str:pk>", job)
    queues.configure("reports", concurrency=3)
    before = queues.get("reports")
    inactive = _bound(create_key("off", every), "cust_b")
    Application.objects.filter(uid="cust_b").update(is_active=False)
    for name, new, expected in [
        ("key of an application, every scope", _bound(create_key("k", every), "cust_a"), 403),
        (
            "key of an application, its scopes",
            create_key("c", _customer_scopes(), application="cust_a"),
            403,
        ),
        ("key of an inactive application", inactive, 403),
        ("operator's key without the scope", create_key("n", others), 403),
    ]:
        response = ApiClient(new.key).call(method.lower(), path, {"concurrency": 1})
        assert response.status_code == expected, (name, response.content[:300])
        assert queues.get("reports") == before, name  # nothing changed
    response = ApiClient(create_key("g", every).key).call(method.lower(), path, {"concurrency": 1})
    assert response.status_code // 100 == 2, response.content[:300]


def test_the_doors_are_found():
    assert {_op_id(op) for _, _, op in API_DOORS} >= {
        "endpoint.enable",
        "endpoint.disable",
        "endpoint.rotate_secret",
        "endpoint.send_test_event",
        "endpoint.replay_failed",
        "delivery.replay",
    }
    assert {_op_id(op) for _, _, op in PORTAL_DOORS} >= {
        "endpoint.enable",
        "endpoint.disable",
        "endpoint.rotate_secret",
        "endpoint.reveal_secret",
        "endpoint.send_test_event",
        "delivery.replay",
    }


@pytest.fixture
def objects(api_conf):
    a = Application.objects.create(uid="cust_a")
    b = Application.objects.create(uid="cust_b")
    endpoint = Endpoint.objects.create(url="https://127.0.0.1:9/a", application=a)
    send_event("a.order", {"n": 1}, application="cust_a")
    Delivery.objects.update(status=Status.DEAD, finished_at="2026-01-01T00:00:00Z")
    return {"a": a, "b": b, "endpoint": endpoint, "delivery": Delivery.objects.get()}


def _prepare(op: Any, objects: dict[str, Any]) -> None:
    """State in which ``op`` changes something (so a refusal is visible as no change)."""
    Endpoint.objects.filter(pk=objects["endpoint"].pk).update(is_active=op.name != "enable")
    Delivery.objects.filter(pk=objects["delivery"].pk).update(status=Status.DEAD)


def _api_call(client: ApiClient, route: str, method: str, op: Any, objects: dict[str, Any]):
    pk = objects["delivery" if op.kind == "delivery" else "endpoint"].pk
    body: dict[str, Any] | None = None
    if "<str:pk>" not in route:
        body = {"ids": [pk]}
    elif op.name == "replay_failed":
        body = {"since": "2000-01-01T00:00:00Z"}
    return client.call(method.lower(), route.replace("<str:pk>", str(pk)), body)


@pytest.mark.parametrize("route, method, op", API_DOORS, ids=[f"{m} {r}" for r, m, _ in API_DOORS])
def test_each_api_door_allows_exactly_the_declared_keys(objects, route, method, op):
    every = tuple(authority.SCOPE_PERMISSIONS)
    customer = _customer_scopes()
    others = tuple(s for s in customer if s != op.scope)
    cases = [
        ("key with the scope", create_key("k", customer, application="cust_a"), 2),
        ("operator's key", create_key("g", every), 2),
        ("key without the scope", create_key("n", others, application="cust_a"), 403),
        ("key of another application", create_key("b", customer, application="cust_b"), 404),
    ]
    for name, new, expected in cases:
        _prepare(op, objects)
        response = _api_call(ApiClient(new.key), route, method, op, objects)
        if "<str:pk>" not in route and expected == 404:
            # A batch names its deliveries in the body: another's are "not found".
            assert response.json()["changed"] == [], name
            continue
        got = response.status_code // 100 if expected == 2 else response.status_code
        assert got == expected, (name, response.content[:300])
    _prepare(op, objects)
    inactive = create_key("off", customer, application="cust_a")
    Application.objects.filter(uid="cust_a").update(is_active=False)
    deliveries = Delivery.objects.count()
    response = _api_call(ApiClient(inactive.key), route, method, op, objects)
    assert response.status_code == 403 and b"inactive" in response.content
    assert Endpoint.objects.get().is_active is (op.name != "enable")
    assert Delivery.objects.get(pk=objects["delivery"].pk).status == Status.DEAD
    assert Delivery.objects.count() == deliveries


@pytest.fixture
def portal(settings, objects):
    """The objects, with the demo's portal (each user's name is their application)."""
    settings.PGQUEUE = {
        **settings.PGQUEUE,
        "WEBHOOKS": {
            **settings.PGQUEUE["WEBHOOKS"],
            "PORTAL_APPLICATION": "testproject.demo.portal.current_application",
        },
    }
    return objects


def _portal_post(username: str, route: str, op: Any, objects: dict[str, Any]):
    client = Client()
    client.force_login(User.objects.get_or_create(username=username)[0])
    pk = objects["delivery" if op.kind == "delivery" else "endpoint"].pk
    return client.post("/webhooks/" + route.replace("<int:pk>", str(pk)))


@pytest.mark.parametrize("route, method, op", PORTAL_DOORS, ids=[r for r, _, _ in PORTAL_DOORS])
def test_each_portal_door_allows_exactly_the_declared_customers(portal, route, method, op):
    objects = portal
    _prepare(op, objects)
    other = _portal_post("cust_b", route, op, objects)
    assert other.status_code == 404
    assert Endpoint.objects.get().is_active is (op.name != "enable")
    own = _portal_post("cust_a", route, op, objects)
    assert (own.status_code in (200, 302)) is op.customer, own.status_code
    # The change is on record, by the customer's user, where an operator reads it.
    entry = LogEntry.objects.get()
    assert entry.user.username == "cust_a" and "portal user 'cust_a'" in entry.change_message
    _prepare(op, objects)
    Application.objects.filter(uid="cust_a").update(is_active=False)
    assert _portal_post("cust_a", route, op, objects).status_code == 404
    assert LogEntry.objects.count() == 1


def test_the_python_operations_check_the_actor_they_are_given(objects):
    from django_pgqueue import operations

    delivery, endpoint = objects["delivery"], objects["endpoint"]
    other = Customer(objects["b"], _user("cb"))
    # Another customer's rows are skipped as not found, and stay as they were.
    result = operations.replay(Delivery, [delivery.pk], actor=other)
    assert result.changed == {} and result.skipped == {delivery.pk: "not found"}
    result = operations.apply_endpoint_operation("disable", [endpoint.pk], actor=other)
    assert result.skipped == {endpoint.pk: "not found"}
    assert Endpoint.objects.get().is_active and Delivery.objects.get().status == Status.DEAD
    # An operator without the permission is refused outright.
    with pytest.raises(authority.Refused, match="replay_delivery"):
        operations.replay(Delivery, [delivery.pk], actor=Operator(_user("n")))
    with pytest.raises(authority.Refused, match="operators only"):
        operations.apply_endpoint_operation(
            "reset_circuit", [endpoint.pk], actor=Customer(objects["a"], _user("ca"))
        )
    # The owner changes them.
    own = Customer(objects["a"], _user("ca2"))
    assert operations.replay(Delivery, [delivery.pk], actor=own).changed == {delivery.pk: "dead"}
    result = operations.apply_endpoint_operation("disable", [endpoint.pk], actor=own)
    assert list(result.changed) == [endpoint.pk]
