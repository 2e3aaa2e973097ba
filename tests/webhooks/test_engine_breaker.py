"""Circuit breaker and auto-disable: no lost work, no burnt attempts, one probe."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection
from django.utils import timezone

from django_pgqueue import send_event, sql
from django_pgqueue.db import connect
from django_pgqueue.models import Delivery, DeliveryAttempt, Endpoint
from django_pgqueue.operations import apply_endpoint_operation
from testproject.demo import receivers

from ..conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("webhooks_conf")]


class Switch:
    """A route that fails with 500 until ``healthy`` is set."""

    def __init__(self):
        self.healthy = False

    def __call__(self, handler, request):
        if self.healthy:
            receivers.ok(handler, request)
        else:
            handler.answer(500, b"down")


def probe_due(endpoint):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT open_until <= now() FROM pgqueue_endpoint WHERE id = %s", [endpoint.pk]
        )
        return cursor.fetchone()[0]


def test_breaker_opens_probes_once_and_closes_without_losing_work(
    receiver, make_endpoint, run_worker, webhooks_conf
):
    webhooks_conf(
        RETRY_SCHEDULE=[0, 0, 0, 0, 0],
        BREAKER_THRESHOLD=3,
        # Long enough that a slow burst run on a loaded machine ends before the
        # cool-down does (a probe inside the first run would break the count).
        BREAKER_COOLDOWN=2.0,
        BREAKER_MAX_COOLDOWN=10.0,
    )
    switch = Switch()
    receiver.routes["/e1"] = switch
    e1 = make_endpoint(receiver.url("/e1"))
    e2 = make_endpoint(receiver.url("/e2"))
    for i in range(6):
        send_event("order.paid", {"n": i})

    # One row per worker run, so each outcome is written before the next claim and
    # nothing is in flight when the circuit opens. (One burst run with a single
    # thread is not enough: its completer writes an outcome after the task thread
    # frees the slot, so the claim of a fourth delivery can race the third
    # failure's commit and send it while the circuit is still closed.)
    for _ in range(20):
        if not run_worker(concurrency=1, prefetch=0, max_tasks=1).claimed:
            break
    e1.refresh_from_db()
    assert e1.breaker_state == "open" and e1.consecutive_failures == 3
    assert e1.breaker_cooldown == 2.0
    assert len(receiver.hits("/e1")) == 3
    # No attempts were burnt while open: 3 attempts in total, the rest untouched.
    e1_deliveries = Delivery.objects.filter(endpoint=e1)
    assert sum(d.attempts for d in e1_deliveries) == 3
    assert not e1_deliveries.filter(status="dead").exists()
    # The healthy endpoint was unaffected.
    assert set(Delivery.objects.filter(endpoint=e2).values_list("status", flat=True)) == {
        "succeeded"
    }

    # Half-open: 8 threads, one probe; it fails and the cool-down doubles.
    wait_for(lambda: probe_due(e1), 10, "the cool-down to end")
    run_worker(concurrency=8)
    e1.refresh_from_db()
    assert len(receiver.hits("/e1")) == 4
    assert e1.breaker_state == "open" and e1.breaker_cooldown == 4.0

    # Recovered: the probe succeeds, the circuit closes, the backlog drains.
    switch.healthy = True
    wait_for(lambda: probe_due(e1), 10, "the second cool-down to end")
    run_worker(concurrency=8)
    e1.refresh_from_db()
    assert e1.breaker_state == "closed" and e1.consecutive_failures == 0
    assert e1.open_until is None and e1.failing_since is None
    assert set(e1_deliveries.values_list("status", flat=True)) == {"succeeded"}
    assert len(receiver.hits("/e1")) == 4 + 6


def test_exactly_one_probe_under_concurrent_claims(receiver, make_endpoint):
    endpoint = make_endpoint(receiver.url("/e1"))
    for i in range(20):
        send_event("order.paid", {"n": i})
    Endpoint.objects.filter(pk=endpoint.pk).update(
        breaker_state="open", open_until=timezone.now() - dt.timedelta(seconds=1)
    )
    claimers = 8
    barrier = threading.Barrier(claimers)
    claimed: list[list[tuple]] = []
    lock = threading.Lock()

    def claim(i):
        with connect(f"probe-test-{i}") as conn:
            params = {
                "limit": 10,
                "lease": 30,
                "worker_id": f"w{i}",
                "all_queues": True,
                "queues": [],
                "max_in_flight": None,
            }
            barrier.wait(10)
            rows = conn.execute(sql.CLAIM_DELIVERIES, params).fetchall()
        with lock:
            claimed.append(rows)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(claimers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert sum(len(rows) for rows in claimed) == 1
    endpoint.refresh_from_db()
    assert endpoint.breaker_state == "half_open"
    assert Delivery.objects.filter(status="in_progress").count() == 1
    assert Delivery.objects.filter(attempts=0).count() == 19


def test_auto_disable_keeps_deliveries_and_reenable_sends_them(
    receiver, make_endpoint, run_worker, webhooks_conf
):
    webhooks_conf(RETRY_SCHEDULE=[0, 0, 0, 0, 0, 0, 0, 0], DISABLE_AFTER=3600.0)
    switch = Switch()
    receiver.routes["/e1"] = switch
    endpoint = make_endpoint(receiver.url("/e1"))
    send_event("order.paid", {"n": 1})
    run_worker(max_tasks=1)
    endpoint.refresh_from_db()
    assert endpoint.failing_since is not None and endpoint.is_active
    # The endpoint has been failing for longer than DISABLE_AFTER.
    Endpoint.objects.filter(pk=endpoint.pk).update(
        failing_since=timezone.now() - dt.timedelta(hours=2)
    )
    send_event("order.paid", {"n": 2})
    run_worker()
    endpoint.refresh_from_db()
    assert not endpoint.is_active and endpoint.disabled_at is not None
    assert endpoint.disabled_reason.startswith("Every delivery failed since ")
    hits = len(receiver.hits("/e1"))
    waiting = Delivery.objects.filter(endpoint=endpoint)
    assert waiting.count() == 2 and not waiting.filter(status__in=["dead", "succeeded"]).exists()
    # Nothing goes out while disabled, and new events do not reach it.
    run_worker()
    assert len(receiver.hits("/e1")) == hits
    send_event("order.paid", {"n": 3})
    assert waiting.count() == 2

    switch.healthy = True
    assert list(apply_endpoint_operation("enable", [endpoint.pk]).changed) == [endpoint.pk]
    run_worker()  # the kept deliveries are due at once after enabling
    assert set(waiting.values_list("status", flat=True)) == {"succeeded"}
    endpoint.refresh_from_db()
    assert endpoint.is_active and endpoint.breaker_state == "closed"
    assert endpoint.disabled_reason == "" and endpoint.failing_since is None


def test_lapsed_delivery_of_an_open_endpoint_is_deferred_not_sent(
    receiver, make_endpoint, run_worker
):
    endpoint = make_endpoint(receiver.url("/e1"))
    event = send_event("order.paid", {"n": 1})
    # A worker claimed it and died; meanwhile the circuit opened.
    Delivery.objects.filter(event=event).update(
        status="in_progress",
        attempts=1,
        locked_by="00000000-0000-0000-0000-000000000001",
        locked_until=timezone.now() - dt.timedelta(seconds=1),
        worker_id="gone-worker",
    )
    Endpoint.objects.filter(pk=endpoint.pk).update(
        breaker_state="open", open_until=timezone.now() + dt.timedelta(hours=1)
    )
    run_worker()
    assert receiver.requests == []
    delivery = Delivery.objects.get(event=event)
    assert delivery.status == "failed" and delivery.attempts == 1
    [attempt] = DeliveryAttempt.objects.filter(delivery=delivery)
    assert attempt.error.startswith("LeaseExpired") and attempt.worker_id == "gone-worker"
