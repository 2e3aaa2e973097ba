"""What a client learns from a refused or repeated ``POST /events``: the field at fault,
whether an answer is a replay, and problem+json for a URL that is not a route."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from .conftest import API, problem_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("event_type", "bad type!"),
        ("channels", "not-a-list"),
        ("idempotency_key", "has spaces in it"),
        ("ordering_key", ""),
        ("payload", {"text": "nul\x00"}),
    ],
)
def test_a_bad_field_is_named_in_errors_and_detail(api, tenants, field, value):
    body = {"event_type": "order.paid", "payload": {"id": 1}, field: value}
    problem = problem_of(api("send").post("events", body), 422)
    assert list(problem["errors"]) == [field]
    assert problem["detail"].startswith(f"{field}: ")
    assert "event:" not in problem["detail"]


def test_a_bad_field_of_a_batch_is_named_with_its_index(api, tenants):
    events = [
        {"event_type": "order.paid", "payload": {"id": 1}},
        {"event_type": "bad type!", "payload": {"id": 2}},
    ]
    problem = problem_of(api("send").post("events/batch", {"events": events}), 422)
    assert list(problem["errors"]) == ["events[1].event_type"]
    assert problem["detail"].startswith("events[1].event_type: ")


def test_a_replay_says_it_is_one(api, tenants):
    client = api("send")
    request = {"event_type": "order.paid", "payload": {"id": 1}, "idempotency_key": "k-9"}
    answers = [client.post("events", request) for _ in range(3)]
    assert [a.get("Idempotent-Replayed") for a in answers] == [None, "true", "true"]
    assert len({a.content for a in answers}) == 1


def test_a_batch_replayed_whole_says_so(api, tenants):
    client = api("send")
    events = [
        {"event_type": "order.paid", "payload": {"id": n}, "idempotency_key": f"b-{n}"}
        for n in range(2)
    ]
    assert "Idempotent-Replayed" not in client.post("events/batch", {"events": events})
    assert client.post("events/batch", {"events": events})["Idempotent-Replayed"] == "true"


@pytest.mark.parametrize("path", ["events/", "nowhere", "endpoints/1/nope"])
def test_a_url_that_is_no_route_is_a_problem_404(api, path):
    response = api("send").post(path, {"event_type": "order.paid", "payload": {}})
    problem = problem_of(response, 404)
    assert problem["code"] == "not_found"
    if path.endswith("/"):
        assert "events" in problem["detail"] and "slash" in problem["detail"]


def test_an_unauthenticated_stray_url_is_still_problem_json():
    response = Client().get(API + "events/")
    assert response["Content-Type"] == "application/problem+json"
    assert json.loads(response.content)["status"] == 404


def test_the_url_names_are_in_their_own_namespace():
    from django.urls import reverse

    assert reverse("pgqueue_api:events") == API + "events"
    assert reverse("pgqueue_api:endpoint", args=[42]) == API + "endpoints/42"
