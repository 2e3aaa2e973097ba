"""Changes made through the API are on record where the admin's are: one admin
``LogEntry`` per changed object, naming the API key (prefix and name) that made it."""

from __future__ import annotations

import logging

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType

from django_pgqueue.api.keys import create_key
from django_pgqueue.models import Application, Delivery, Endpoint

from .conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def robot(api_conf, world):
    """A client whose key is named ``ops-robot``, and the ``pgq_<prefix>`` it shows."""
    new = create_key("ops-robot", ("read", "manage", "secrets"))
    return ApiClient(new.key), f"pgq_{new.api_key.prefix}"


def _entries(model, pk) -> list[LogEntry]:
    content_type = ContentType.objects.get_for_model(model, for_concrete_model=False)
    return list(
        LogEntry.objects.filter(content_type=content_type, object_id=str(pk)).order_by("pk")
    )


def _only(model, pk, flag, prefix) -> LogEntry:
    [entry] = _entries(model, pk)
    assert entry.action_flag == flag
    assert entry.user.get_username() == "pgqueue-api"
    assert f"API key {prefix} 'ops-robot'" in entry.change_message, entry.change_message
    return entry


@pytest.mark.parametrize(
    ("operation", "words"),
    [("disable", "Disable (was enabled"), ("enable", "Enable (was disabled")],
)
def test_enable_and_disable_are_on_record_with_the_key(robot, world, operation, words):
    client, prefix = robot
    endpoint = world["ep_a"]
    if operation == "enable":
        Endpoint.objects.filter(pk=endpoint.pk).update(is_active=False)
    assert client.post(f"endpoints/{endpoint.pk}/{operation}").status_code == 200
    entry = _only(Endpoint, endpoint.pk, CHANGE, prefix)
    assert entry.change_message.startswith(words), entry.change_message
    assert entry.object_repr == str(Endpoint.objects.get(pk=endpoint.pk))


def test_replays_are_on_record_per_delivery(robot, world):
    client, prefix = robot
    dlv_a, dlv_b = world["dlv_a"], world["dlv_b"]
    assert client.post(f"deliveries/{dlv_a.pk}/replay").json()["changed"] == [dlv_a.pk]
    assert _only(Delivery, dlv_a.pk, CHANGE, prefix).change_message.startswith(
        "Replay: dead -> pending"
    )
    assert client.post("deliveries/replay", {"ids": [dlv_b.pk]}).json()["changed"] == [dlv_b.pk]
    assert _only(Delivery, dlv_b.pk, CHANGE, prefix).change_message.startswith(
        "Replay: dead -> pending"
    )
    # Nothing replayed, nothing on record.
    client.post("deliveries/replay", {"ids": [dlv_b.pk]})
    assert len(_entries(Delivery, dlv_b.pk)) == 1


def test_a_replay_since_a_time_is_on_record_per_delivery_and_endpoint(robot, world):
    client, prefix = robot
    endpoint, delivery = world["ep_a"], world["dlv_a"]
    response = client.post(f"endpoints/{endpoint.pk}/replay", {"since": "2000-01-01T00:00:00Z"})
    assert response.json()["changed"] == [delivery.pk]
    assert (
        "endpoint replay since 2000-01-01"
        in _only(Delivery, delivery.pk, CHANGE, prefix).change_message
    )
    assert _only(Endpoint, endpoint.pk, CHANGE, prefix).change_message.startswith(
        "Replayed 1 failed/dead deliveries created since 2000-01-01"
    )


def test_rotating_a_secret_and_a_test_event_are_on_record(robot, world):
    client, prefix = robot
    endpoint = world["ep_a"]
    secret = client.post(f"endpoints/{endpoint.pk}/rotate-secret").json()["secret"]
    delivery = client.post(f"endpoints/{endpoint.pk}/test").json()["delivery_id"]
    rotated, tested = _entries(Endpoint, endpoint.pk)
    assert rotated.change_message.startswith("Rotated the signing secret")
    assert tested.change_message.startswith(f"Sent a test event (delivery #{delivery})")
    for entry in (rotated, tested):
        assert f"API key {prefix} 'ops-robot'" in entry.change_message
        # The record never holds the secret.
        assert secret not in entry.change_message


def test_endpoint_create_change_and_delete_are_on_record(robot, world):
    client, prefix = robot
    created = client.post("endpoints", {"url": "https://127.0.0.1:9/new", "application": "cust_a"})
    pk = created.json()["id"]
    assert _only(Endpoint, pk, ADDITION, prefix).change_message.startswith("Added")
    client.patch(f"endpoints/{pk}", {"description": "nightly", "event_types": ["order.*"]})
    changed = _entries(Endpoint, pk)[-1]
    assert changed.action_flag == CHANGE
    assert changed.change_message.startswith("Changed description and event_types")
    assert f"API key {prefix} 'ops-robot'" in changed.change_message
    name = str(Endpoint.objects.get(pk=pk))
    assert client.delete(f"endpoints/{pk}").status_code == 204
    deleted = _entries(Endpoint, pk)[-1]
    assert deleted.action_flag == DELETION and deleted.object_repr == name
    assert f"API key {prefix} 'ops-robot'" in deleted.change_message


def test_application_changes_are_on_record(robot, world):
    client, prefix = robot
    assert client.post("applications", {"uid": "cust_c", "name": "C"}).status_code == 201
    pk = Application.objects.get(uid="cust_c").pk
    assert _only(Application, pk, ADDITION, prefix).change_message.startswith("Added")
    client.patch("applications/cust_c", {"name": "Cee", "is_active": False})
    changed = _entries(Application, pk)[-1]
    assert changed.change_message.startswith("Changed name and is_active")
    assert client.delete("applications/cust_c").status_code == 204
    deleted = _entries(Application, pk)[-1]
    assert deleted.action_flag == DELETION and deleted.object_repr == "Cee"
    assert f"API key {prefix} 'ops-robot'" in deleted.change_message


def test_reads_and_refused_changes_leave_no_record(robot, world):
    client, _ = robot
    client.get("endpoints")
    client.get(f"deliveries/{world['dlv_a'].pk}")
    client.patch(f"endpoints/{world['ep_a'].pk}", {"url": "ftp://nowhere"})  # 422
    assert not LogEntry.objects.exists()


def test_the_admin_history_of_an_object_shows_api_and_admin_changes(admin_client, robot, world):
    client, prefix = robot
    endpoint = world["ep_a"]
    client.post(f"endpoints/{endpoint.pk}/disable")
    admin_client.post(
        "/admin/django_pgqueue/endpoint/",
        {"action": "enable", "_selected_action": [endpoint.pk], "post": "yes"},
    )
    users = [e.user.get_username() for e in _entries(Endpoint, endpoint.pk)]
    assert users == ["pgqueue-api", "admin"]
    page = admin_client.get(f"/admin/django_pgqueue/endpoint/{endpoint.pk}/history/")
    assert page.status_code == 200
    assert f"API key {prefix} &#x27;ops-robot&#x27;".encode() in page.content
    assert b"pgqueue-api" in page.content


def test_the_audit_user_cannot_log_in(robot, world):
    client, _ = robot
    client.post(f"endpoints/{world['ep_a'].pk}/disable")
    user = get_user_model().objects.get(username="pgqueue-api")
    assert not user.is_active and not user.has_usable_password()
    assert not user.is_staff and not user.is_superuser


def test_without_an_audit_user_the_log_line_remains(api_conf, world, caplog):
    api_conf(AUDIT_USER=None)
    new = create_key("ops-robot", ("manage",))
    with caplog.at_level(logging.INFO, logger="django_pgqueue.api"):
        ApiClient(new.key).post(f"endpoints/{world['ep_a'].pk}/disable")
    assert not LogEntry.objects.exists()
    assert f"API key pgq_{new.api_key.prefix} 'ops-robot'" in caplog.text
