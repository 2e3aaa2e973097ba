"""Hostile receivers cannot take a task thread: whatever our delivery code raises
on their answer becomes a failed attempt, and the worker keeps every thread."""

from __future__ import annotations

import pytest

from django_pgqueue import send_event
from django_pgqueue.models import Delivery, Status
from testproject.demo import receivers

from ..conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("webhooks_conf")]


def test_retry_after_of_400_digits_fails_the_attempt_not_the_thread(
    receiver, make_endpoint, run_worker, webhooks_conf
):
    webhooks_conf(RETRY_SCHEDULE=[600])
    # A Retry-After no float can hold, on the statuses whose Retry-After is read.
    for path, code in (("/busy", 503), ("/slow", 429)):
        receiver.routes[path] = receivers.status(code, headers={"Retry-After": "9" * 400})
        make_endpoint(receiver.url(path))
    for i in range(5):
        make_endpoint(receiver.url(f"/ok{i}"))
    event = send_event("order.paid", {"order_id": 1})
    worker = run_worker(burst=False, concurrency=2, lease_seconds=1.5)

    def settled():
        return not Delivery.objects.filter(event=event, status=Status.IN_PROGRESS).exists() and (
            Delivery.objects.filter(event=event, status=Status.SUCCEEDED).count() == 5
        )

    wait_for(settled, 20, "every delivery to be recorded")
    hostile = Delivery.objects.filter(event=event, endpoint__url__contains="/busy") | (
        Delivery.objects.filter(event=event, endpoint__url__contains="/slow")
    )
    assert sorted(d.status for d in hostile) == [Status.FAILED, Status.FAILED]
    assert all(d.locked_until is None and d.attempts == 1 for d in hostile)
    for i in range(5):
        assert len(receiver.hits(f"/ok{i}")) == 1  # innocent deliveries sent once
    assert len(receiver.hits("/busy")) == len(receiver.hits("/slow")) == 1
    alive = [t for t in worker._threads if t.is_alive()]
    assert len(alive) == 2 and worker.replaced == 0
