"""POST /events and /events/batch: commit-then-2xx, idempotency, limits."""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from django_pgqueue.models import Delivery, Event

from .conftest import problem_of

pytestmark = pytest.mark.django_db(transaction=True)


def _committed_deliveries(event_id: int) -> list[int]:
    """The event's deliveries as another connection sees them: committed rows only."""
    seen: list[int] = []

    def read() -> None:
        try:
            seen.extend(Delivery.objects.filter(event_id=event_id).values_list("pk", flat=True))
        finally:
            connections.close_all()

    thread = threading.Thread(target=read)
    thread.start()
    thread.join()
    return seen


def test_an_event_and_all_its_deliveries_exist_when_the_202_comes(api, tenants):
    client = api("send")
    with CaptureQueriesContext(connections["default"]) as queries:
        response = client.post("events", {"event_type": "order.paid", "payload": {"id": 1}})
    assert response.status_code == 202, response.content
    # The hot path: the key with its rate limit, then the event and its fan-out in one
    # statement and one transaction, committed before the answer; no savepoints.
    statements = [q["sql"].split("*/")[0].strip("/* ") for q in queries.captured_queries]
    assert not [s for s in statements if "SAVEPOINT" in s]
    # Django logs BEGIN and COMMIT on some versions only.
    assert [s for s in statements if s not in ("BEGIN", "COMMIT")] == [
        "pgqueue:api_authenticate",
        "pgqueue:record_event",
    ]
    body = response.json()
    assert len(_committed_deliveries(body["id"])) == body["deliveries"] == 1
    # The rate limit's asynchronous commit was local to its own statement: the event's
    # transaction, and anything after it on the connection, commit synchronously.
    with connections["default"].cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"
    event = Event.objects.get(pk=body["id"])
    assert body["webhook_id"] == event.msg_id
    assert body["deliveries"] == 1  # the one global endpoint
    assert list(Delivery.objects.filter(event=event).values_list("endpoint", flat=True)) == [
        tenants["ep_global"].pk
    ]


def test_an_application_event_fans_out_to_that_application(api, tenants):
    response = api("send").post(
        "events", {"event_type": "order.paid", "payload": {}, "application": "cust_a"}
    )
    assert response.status_code == 202
    assert response.json()["application"] == "cust_a"
    assert Delivery.objects.get().endpoint == tenants["ep_a"]


def test_a_failing_fan_out_leaves_nothing(api, tenants):
    """The event row is written, then its fan-out fails: the answer is an error, not
    a 2xx, and the event is gone with the rolled-back transaction."""
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION pgq_test_fail() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'fan-out refused'; END $$"
        )
        cursor.execute(
            "CREATE TRIGGER pgq_test_fail BEFORE INSERT ON pgqueue_delivery "
            "FOR EACH ROW EXECUTE FUNCTION pgq_test_fail()"
        )
    client = api("send")
    client.client.raise_request_exception = False
    try:
        response = client.post("events", {"event_type": "order.paid", "payload": {"id": 1}})
    finally:
        with connections["default"].cursor() as cursor:
            cursor.execute("DROP TRIGGER pgq_test_fail ON pgqueue_delivery")
            cursor.execute("DROP FUNCTION pgq_test_fail()")
    assert response.status_code >= 500
    assert Event.objects.count() == 0
    assert Delivery.objects.count() == 0


def test_the_same_key_and_body_give_the_same_answer(api, tenants):
    client = api("send")
    request = {"event_type": "order.paid", "payload": {"id": 1}, "idempotency_key": "k-1"}
    first = client.post("events", request)
    again = client.post("events", request)
    assert first.status_code == again.status_code == 202
    assert first.json() == again.json()
    assert Event.objects.count() == 1 and Delivery.objects.count() == 1


def test_the_header_is_the_same_key_as_the_field(api, tenants):
    client = api("send")
    request = {"event_type": "order.paid", "payload": {"id": 1}}
    first = client.post("events", request, headers={"Idempotency-Key": "h-1"})
    again = client.post("events", {**request, "idempotency_key": "h-1"})
    assert first.json() == again.json()
    mixed = client.post(
        "events", {**request, "idempotency_key": "x"}, headers={"Idempotency-Key": "y"}
    )
    problem_of(mixed, 422)


#: The first request of each case, then a repeat with the same key changing one stored
#: field (every field of ``EVENT_FIELDS`` but the key itself, both ways where it is
#: optional).
FIRST = {"event_type": "order.paid", "payload": {"id": 1}, "ordering_key": "o-1"}
CHANGES = {
    "payload": ({}, {"payload": {"id": 2}}),
    "payload key order": (
        {"payload": {"a": 1, "b": 2}},
        {"payload": {"b": 2, "a": 1}},
    ),
    "event_type": ({}, {"event_type": "order.refunded"}),
    "channels added": ({}, {"channels": ["eu"]}),
    "channels changed": ({"channels": ["eu"]}, {"channels": ["us"]}),
    "channels removed": ({"channels": ["eu"]}, {"channels": None}),
    "application added": ({}, {"application": "cust_a"}),
    "application changed": ({"application": "cust_a"}, {"application": "cust_b"}),
    "application removed": ({"application": "cust_a"}, {"application": None}),
    "ordering_key changed": ({}, {"ordering_key": "o-2"}),
    "ordering_key removed": ({}, {"ordering_key": None}),
    "ordering_key added": ({"ordering_key": None}, {"ordering_key": "o-1"}),
}


def test_every_stored_field_of_a_request_is_compared():
    from django_pgqueue.api.events import EVENT_FIELDS

    changed = {name.split()[0] for name in CHANGES}
    assert changed == set(EVENT_FIELDS) - {"idempotency_key"}


def _post(client, batch: bool, request: dict):
    if batch:
        return client.post("events/batch", {"events": [request]})
    return client.post("events", request)


@pytest.mark.parametrize("batch", [False, True], ids=["events", "batch"])
@pytest.mark.parametrize(("first", "change"), list(CHANGES.values()), ids=list(CHANGES))
def test_the_same_key_with_another_request_is_a_409(api, tenants, batch, first, change):
    client = api("send")
    request = {**FIRST, **first, "idempotency_key": "k-1"}
    assert _post(client, batch, request).status_code == 202
    # The same request again is the same answer...
    assert _post(client, batch, request).status_code == 202
    # ...and one stored field changed is a conflict, whatever the field.
    body = problem_of(_post(client, batch, {**request, **change}), 409)
    assert body["code"] == "idempotency_conflict"
    assert "k-1" in body["detail"]
    assert Event.objects.count() == 1


def test_the_ordering_key_of_an_event_is_stored(api, tenants):
    """The ordering key is kept on the event, so a repeat is compared with it even when
    no endpoint orders by key (and the event has no delivery that carries it)."""
    client = api("send")
    event = client.post("events", {**FIRST, "idempotency_key": "k-1"}).json()
    assert Event.objects.get(pk=event["id"]).ordering_key == "o-1"
    assert event["ordering_key"] == "o-1"


def test_concurrent_duplicates_create_one_event(api, tenants):
    """Ten threads, each on its own database connection, send the same keyed event at
    once: the unique constraint lets one in and the others get its answer."""
    key = api("send").key
    request = {"event_type": "order.paid", "payload": {"id": 1}, "idempotency_key": "race-1"}
    barrier = threading.Barrier(10)
    answers: list[tuple[int, dict]] = []

    def send() -> None:
        from .conftest import ApiClient

        try:
            barrier.wait()
            response = ApiClient(key).post("events", request)
            answers.append((response.status_code, json.loads(response.content)))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [status for status, _ in answers] == [202] * 10
    assert len({json.dumps(body, sort_keys=True) for _, body in answers}) == 1
    assert Event.objects.count() == 1 and Delivery.objects.count() == 1


def test_a_batch_is_all_or_nothing(api, tenants):
    client = api("send")
    good = {"event_type": "order.paid", "payload": {"id": 1}}
    response = client.post("events/batch", {"events": [good, {**good, "payload": {"id": 2}}]})
    assert response.status_code == 202, response.content
    assert [e["deliveries"] for e in response.json()["events"]] == [1, 1]
    assert Event.objects.count() == 2
    # The third event names an application that does not exist: nothing of the batch stays.
    bad = {"events": [good, good, {**good, "application": "nobody"}]}
    body = problem_of(client.post("events/batch", bad), 422)
    assert "events[2]" in body["detail"]
    assert Event.objects.count() == 2 and Delivery.objects.count() == 2


def test_a_batch_over_the_limit_is_refused(api, api_conf, tenants):
    api_conf(MAX_BATCH=2)
    good = {"event_type": "order.paid", "payload": {}}
    problem_of(api("send").post("events/batch", {"events": [good] * 3}), 422)
    assert Event.objects.count() == 0


@pytest.mark.parametrize(
    ("raw", "content_type", "status"),
    [
        (b'{"event_type": "a", "payload": {}', "application/json", 400),  # cut short
        (b"[1, 2]", "application/json", 400),  # not an object
        (b'{"event_type": "a", "payload": NaN}', "application/json", 400),
        (b"\xff\xfe", "application/json", 400),
        (b'{"event_type": "a", "payload": {}}', "text/plain", 415),
        (b'{"event_type": "a", "payload": {}}', "application/x-www-form-urlencoded", 415),
        (b'{"event_type": "a", "payload": {"s": "a\\u0000b"}}', "application/json", 422),
        (b'{"event_type": "a", "payload": {"s": "\\ud800"}}', "application/json", 422),
        (b'{"event_type": "a b", "payload": {}}', "application/json", 422),
        (b'{"event_type": "a", "payload": [1]}', "application/json", 422),
        (b'{"event_type": "a", "payload": {}, "extra": 1}', "application/json", 422),
        (b'{"event_type": "a", "payload": {}, "channels": "eu"}', "application/json", 422),
        (b'{"event_type": "a", "payload": {}, "application": 5}', "application/json", 422),
        (b'{"event_type": "a", "payload": {}, "idempotency_key": " "}', "application/json", 422),
        (b'{"payload": {}}', "application/json", 422),
    ],
)
def test_bad_input_is_a_problem_never_a_500(api, tenants, raw, content_type, status):
    response = api("send").post("events", raw=raw, content_type=content_type)
    problem_of(response, status)
    assert Event.objects.count() == 0


def test_deep_json_is_refused(api, api_conf, settings, tenants):
    deep: dict = {}
    node = deep
    for _ in range(150):
        node["x"] = {}
        node = node["x"]
    body = problem_of(api("send").post("events", {"event_type": "a", "payload": deep}), 422)
    assert "nested too deeply" in body["detail"]
    # Deeper than Python's parser goes: still a 400, not a RecursionError.
    raw = b'{"event_type": "a", "payload": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    problem_of(api("send").post("events", raw=raw), 400)


def test_an_oversized_body_is_a_413(api, api_conf, tenants):
    api_conf(MAX_BODY_BYTES=1000)
    body = problem_of(
        api("send").post("events", {"event_type": "a", "payload": {"s": "x" * 2000}}), 413
    )
    assert "MAX_BODY_BYTES" in body["detail"]


def test_a_payload_over_the_webhook_limit_is_a_413(api, settings, tenants):
    settings.PGQUEUE = {
        **settings.PGQUEUE,
        "WEBHOOKS": {**settings.PGQUEUE["WEBHOOKS"], "MAX_PAYLOAD_BYTES": 100},
    }
    problem_of(api("send").post("events", {"event_type": "a", "payload": {"s": "x" * 200}}), 413)
