"""A disabled endpoint's waiting deliveries are parked out of the claim's way
(``PARKING_TRIGGER``, models/database_objects.py) and come back due at once when it is enabled."""

from __future__ import annotations

import pytest
from django.utils import timezone

from django_pgqueue import send_event, sql
from django_pgqueue.db import connect
from django_pgqueue.models import Delivery, Endpoint
from django_pgqueue.operations import apply_endpoint_operation
from testproject.demo import receivers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("webhooks_conf")]


def states(endpoint) -> dict[int, tuple[str, bool]]:
    return {d.pk: (d.status, d.is_parked) for d in Delivery.objects.filter(endpoint=endpoint)}


def claim(limit: int = 50) -> list[tuple]:
    with connect("test-claim") as conn:
        params = {"limit": limit, "lease": 30.0, "worker_id": "test", "max_in_flight": None}
        return conn.execute(sql.CLAIM_DELIVERIES, params).fetchall()


def test_disabling_in_any_way_parks_waiting_deliveries_and_only_those(receiver, make_endpoint):
    endpoint = make_endpoint(receiver.url("/ok"))
    waiting = [send_event("order.paid", {"n": i}).deliveries.get() for i in range(3)]
    Delivery.objects.filter(pk=waiting[1].pk).update(status="failed", attempts=1)
    done = send_event("order.paid", {"n": 9}).deliveries.get()
    Delivery.objects.filter(pk=done.pk).update(status="succeeded", finished_at=timezone.now())

    # A plain QuerySet.update(), as a script or a migration of the user's would do it.
    Endpoint.objects.filter(pk=endpoint.pk).update(is_active=False)
    assert states(endpoint) == {
        waiting[0].pk: ("pending", True),
        waiting[1].pk: ("failed", True),
        waiting[2].pk: ("pending", True),
        done.pk: ("succeeded", False),
    }
    assert Delivery.objects.get(pk=waiting[1].pk).attempts == 1  # nothing else changes

    before = timezone.now()
    apply_endpoint_operation("enable", [endpoint.pk])  # the admin's, the API's, the portal's
    for pk in (d.pk for d in waiting):
        delivery = Delivery.objects.get(pk=pk)
        assert not delivery.is_parked
        assert before - timezone.timedelta(seconds=1) <= delivery.next_attempt_at <= timezone.now()


def test_parked_deliveries_are_not_read_by_the_claim_and_go_out_once_enabled(
    receiver, make_endpoint, run_worker
):
    parked_ep = make_endpoint(receiver.url("/later"))
    live_ep = make_endpoint(receiver.url("/now"))
    for i in range(5):
        send_event("order.paid", {"n": i})
    assert apply_endpoint_operation("disable", [parked_ep.pk]).changed
    assert all(parked for _, parked in states(parked_ep).values())

    run_worker()
    assert len(receiver.hits("/now")) == 5 and receiver.hits("/later") == []
    assert not claim()  # nothing due: the parked rows are beyond the claim's range

    assert apply_endpoint_operation("enable", [parked_ep.pk]).changed
    run_worker()
    assert len(receiver.hits("/later")) == 5
    assert set(states(parked_ep).values()) == {("succeeded", False)}
    assert set(states(live_ep).values()) == {("succeeded", False)}


def test_410_gone_parks_the_rest_of_the_endpoints_backlog(receiver, make_endpoint, run_worker):
    receiver.routes["/gone"] = receivers.status(410)
    endpoint = make_endpoint(receiver.url("/gone"))
    for i in range(4):
        send_event("order.paid", {"n": i})
    run_worker(concurrency=1, prefetch=0)
    endpoint.refresh_from_db()
    assert not endpoint.is_active
    rows = states(endpoint)
    assert len(rows) == 4 and all(parked for _, parked in rows.values())
    # The worker may have claimed more before the first outcome was written (outcomes
    # are written in batches): every attempted delivery is 'failed' and parked too.
    statuses = [status for status, _ in rows.values()]
    assert statuses.count("failed") == len(receiver.hits("/gone")) >= 1
    assert statuses.count("pending") == 4 - statuses.count("failed")


def test_parked_instant_is_the_same_in_python_and_in_sql():
    with connect("test-parked") as conn:
        value = conn.execute(f"SELECT {sql.PARKED}").fetchone()[0]
    assert value == sql.PARKED_AT
