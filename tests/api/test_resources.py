"""Endpoints, deliveries, applications and event types through the API."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from django_pgqueue.models import Application, Delivery, Endpoint, Event, Status
from django_pgqueue.webhooks.fanout import send_event

from .conftest import problem_of

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_endpoint_secret_is_shown_on_create_and_rotation_only(api, tenants):
    client = api("read", "manage", "secrets")
    response = client.post(
        "endpoints",
        {
            "url": "https://127.0.0.1:9/new",
            "event_types": ["order.*"],
            "headers": {"X-Token": "receiver-credential"},
        },
    )
    assert response.status_code == 201, response.content
    created = response.json()
    endpoint = Endpoint.objects.get(pk=created["id"])
    assert created["secret"] == endpoint.secret and created["secret"].startswith("whsec_")
    shown = client.get(f"endpoints/{endpoint.pk}")
    assert shown.status_code == 200
    assert "secret" not in shown.json() and created["secret"].encode() not in shown.content
    assert shown.json()["header_names"] == ["X-Token"]
    assert b"receiver-credential" not in shown.content
    rotated = client.post(f"endpoints/{endpoint.pk}/rotate-secret").json()["secret"]
    endpoint.refresh_from_db()
    assert rotated == endpoint.secret != created["secret"]
    assert len(endpoint.previous_secrets) == 1  # the old one still signs in the grace period


def test_a_broker_endpoint_round_trips_with_its_password_masked(api, tenants):
    pytest.importorskip("pika", reason="the brokers extra is not installed")
    client = api("read", "manage")
    url = "amqp://pub:s3cret@127.0.0.1:5672/%2F?exchange=orders&routing_key=paid"
    created = client.post("endpoints", {"url": url})
    assert created.status_code == 201, created.content
    shown = "amqp://pub:***@127.0.0.1:5672/%2F?exchange=orders&routing_key=paid"
    assert created.json()["url"] == shown and b"s3cret" not in created.content
    endpoint_id = created.json()["id"]
    # Sent back as shown, with another change: the stored password is kept.
    edited = client.patch(f"endpoints/{endpoint_id}", {"url": shown, "description": "x"})
    assert edited.status_code == 200, edited.content
    stored = Endpoint.objects.get(pk=endpoint_id).url
    assert "s3cret" not in stored and stored.startswith("amqp://pub:~sealed~")
    assert stored.endswith("@127.0.0.1:5672/%2F?exchange=orders&routing_key=paid")
    refused = problem_of(client.post("endpoints", {"url": "amqp://127.0.0.1:5672/"}), 422)
    assert "has no exchange" in refused["detail"]


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("https://169.254.169.254/latest/meta-data", "cannot receive webhooks"),
        ("https://10.1.2.3/hook", "cannot receive webhooks"),
        ("https://[::1]/hook", "cannot receive webhooks"),
        ("ftp://127.0.0.1/hook", "cannot receive webhooks"),
        ("not a url", "url"),
    ],
)
def test_endpoint_urls_pass_the_ssrf_check(api, tenants, url, words):
    body = problem_of(api("manage").post("endpoints", {"url": url}), 422)
    assert "url" in body["errors"] and words in body["detail"]
    assert Endpoint.objects.count() == 3


@pytest.mark.parametrize(
    "change",
    [
        {"url": 5},
        {"event_types": "order.paid"},
        {"event_types": ["not a type"]},
        {"channels": [""]},
        {"headers": {"Host": "x"}},
        {"headers": {"X": 1}},
        {"headers": []},
        {"max_in_flight": 0},
        {"max_in_flight": True},
        {"rate_period": 7},
        {"ordering": "sideways"},
        {"description": None},
        {"secret": "nope"},
        {"application": "nobody"},
        {"unknown": 1},
    ],
)
def test_bad_endpoint_fields_are_422_naming_the_field(api, tenants, change):
    body = problem_of(
        api("manage").post("endpoints", {"url": "https://127.0.0.1:9/x", **change}), 422
    )
    assert set(body["errors"]) == set(change)
    assert Endpoint.objects.count() == 3


def test_an_endpoint_is_changed_disabled_enabled_and_deleted(api, tenants):
    client = api("read", "manage")
    pk = tenants["ep_a"].pk
    changed = client.patch(f"endpoints/{pk}", {"description": "orders", "rate_limit": 5})
    assert changed.status_code == 200, changed.content
    assert changed.json()["description"] == "orders" and changed.json()["rate_limit"] == 5
    problem_of(client.patch(f"endpoints/{pk}", {"url": "https://10.0.0.1/x"}), 422)
    assert Endpoint.objects.get(pk=pk).url == tenants["ep_a"].url
    disabled = client.post(f"endpoints/{pk}/disable").json()
    assert disabled["is_active"] is False and disabled["disabled_at"]
    assert client.post(f"endpoints/{pk}/enable").json()["is_active"] is True
    assert client.delete(f"endpoints/{pk}").status_code == 204
    assert not Endpoint.objects.filter(pk=pk).exists()
    problem_of(client.get(f"endpoints/{pk}"), 404)


def test_a_test_event_goes_to_that_endpoint_only(api, tenants):
    response = api("manage").post(f"endpoints/{tenants['ep_a'].pk}/test")
    assert response.status_code == 202
    delivery = Delivery.objects.get(pk=response.json()["delivery_id"])
    assert delivery.endpoint == tenants["ep_a"] and delivery.event.event_type == "pgqueue.test"
    assert Delivery.objects.count() == 1


def test_replay_since_a_time_replays_that_endpoints_failed_deliveries(api, tenants):
    for n in range(3):
        send_event("order.paid", {"n": n}, application="cust_a")
    old = Delivery.objects.order_by("id").first()
    Delivery.objects.update(status=Status.DEAD, finished_at=timezone.now())
    Delivery.objects.filter(pk=old.pk).update(created_at=timezone.now() - dt.timedelta(days=2))
    since = (timezone.now() - dt.timedelta(days=1)).isoformat()
    response = api("manage").post(f"endpoints/{tenants['ep_a'].pk}/replay", {"since": since})
    assert response.status_code == 200, response.content
    assert len(response.json()["changed"]) == 2
    assert Delivery.objects.get(pk=old.pk).status == Status.DEAD
    problem_of(
        api("manage").post(f"endpoints/{tenants['ep_a'].pk}/replay", {"since": "yesterday"}), 422
    )


def test_deliveries_are_filtered(api, tenants):
    send_event("order.paid", {}, application="cust_a")
    send_event("order.refunded", {}, application="cust_a")
    send_event("order.paid", {}, application="cust_b")
    send_event("order.paid", {})
    Delivery.objects.filter(event__event_type="order.refunded").update(
        status=Status.DEAD, finished_at=timezone.now()
    )
    client = api("read")

    def ids(**query):
        response = client.get("deliveries", **query)
        assert response.status_code == 200, response.content
        return {d["id"] for d in response.json()["data"]}

    by_type = {
        e: set(Delivery.objects.filter(event__event_type=e).values_list("pk", flat=True))
        for e in ("order.paid", "order.refunded")
    }
    assert ids(event_type="order.refunded") == by_type["order.refunded"]
    assert ids(status="dead") == by_type["order.refunded"]
    assert ids(endpoint=str(tenants["ep_b"].pk)) == set(
        Delivery.objects.filter(endpoint=tenants["ep_b"]).values_list("pk", flat=True)
    )
    assert len(ids(application="cust_a")) == 2
    future = (timezone.now() + dt.timedelta(hours=1)).isoformat()
    assert ids(since=future) == set()
    assert len(ids(until=future)) == 4
    for bad in (
        {"status": "lost"},
        {"endpoint": "x"},
        {"since": "soon"},
        {"limit": "0"},
        {"cursor": "!!"},
        {"event_type": "a b"},
    ):
        problem_of(client.get("deliveries", **bad), 400)


def test_cursor_pages_are_stable_under_inserts(api, tenants):
    for n in range(7):
        send_event("order.paid", {"n": n})
    client = api("read")
    expected = list(Delivery.objects.order_by("-id").values_list("pk", flat=True))
    seen: list[int] = []
    cursor = None
    while True:
        query = {"limit": "3", **({"cursor": cursor} if cursor else {})}
        page = client.get("deliveries", **query).json()
        seen += [d["id"] for d in page["data"]]
        # New deliveries arrive between pages: they never shift or repeat a page.
        send_event("order.paid", {"late": True})
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == expected


def test_a_delivery_shows_its_attempts_and_replays(api, tenants):
    from django_pgqueue.models import DeliveryAttempt

    send_event("order.paid", {"id": 9}, application="cust_a")
    delivery = Delivery.objects.get()
    DeliveryAttempt.objects.create(
        delivery=delivery, attempt=1, started_at=timezone.now(), status_code=500, error="HTTP 500"
    )
    Delivery.objects.update(status=Status.DEAD, attempts=1, finished_at=timezone.now())
    client = api("read", "manage")
    shown = client.get(f"deliveries/{delivery.pk}").json()
    assert shown["payload"] == {"id": 9} and shown["status"] == "dead"
    assert [(a["attempt"], a["status_code"]) for a in shown["attempts_log"]] == [(1, 500)]
    assert client.post(f"deliveries/{delivery.pk}/replay").json()["changed"] == [delivery.pk]
    assert Delivery.objects.get().status == Status.PENDING
    again = client.post(f"deliveries/{delivery.pk}/replay").json()
    assert again == {"changed": [], "skipped": {str(delivery.pk): "is pending"}}
    bulk = client.post("deliveries/replay", {"ids": [delivery.pk, 10**30]})
    assert bulk.status_code == 200 and bulk.json()["skipped"][str(10**30)] == "not found"
    for bad in ("99999999999999999999", "0", "-1", "abc", "1e3", "\u0661"):
        problem_of(client.get(f"deliveries/{bad}"), 404)
        problem_of(client.post(f"endpoints/{bad}/enable"), 404)


def test_applications_are_created_changed_and_deleted(api, tenants):
    client = api("read", "manage")
    created = client.post("applications", {"uid": "cust_c", "name": "C", "metadata": {"tier": 1}})
    assert created.status_code == 201, created.content
    assert created.json()["uid"] == "cust_c"
    problem_of(client.post("applications", {"uid": "cust_c"}), 409)
    problem_of(client.post("applications", {"uid": "has space"}), 422)
    problem_of(client.post("applications", {"uid": "x", "is_active": "yes"}), 422)
    changed = client.patch("applications/cust_c", {"is_active": False})
    assert changed.json()["is_active"] is False
    uids = [a["uid"] for a in client.get("applications").json()["data"]]
    assert uids == ["cust_a", "cust_b", "cust_c"]
    assert client.delete("applications/cust_c").status_code == 204
    assert not Application.objects.filter(uid="cust_c").exists()


def test_event_types_are_the_declared_and_the_seen(api, settings, tenants):
    settings.PGQUEUE = {
        **settings.PGQUEUE,
        "WEBHOOKS": {
            **settings.PGQUEUE["WEBHOOKS"],
            "EVENT_TYPES": {
                "order.paid": {"description": "Paid", "schema": {"type": "object"}},
                "order.shipped": {"description": "Shipped"},
            },
        },
    }
    send_event("order.paid", {})
    send_event("user.created", {})
    data = {t["name"]: t for t in api("read").get("event-types").json()["data"]}
    assert set(data) == {"order.paid", "order.shipped", "user.created"}
    assert data["order.paid"]["declared"] and data["order.paid"]["seen"]
    assert data["order.paid"]["schema"] == {"type": "object"}
    assert not data["order.shipped"]["seen"] and not data["user.created"]["declared"]
    assert Event.objects.count() == 2


def test_the_document_names_the_mount_point_as_its_server(client):
    document = client.get("/webhooks/api/openapi.json").json()
    assert document["servers"] == [{"url": "/webhooks/api"}]


def test_a_method_a_route_has_not_is_a_405_problem(api, tenants):
    response = api("read").call("put", "endpoints")
    assert problem_of(response, 405)["code"] == "method_not_allowed"
    assert response["Allow"] == "GET, POST"
