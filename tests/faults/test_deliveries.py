"""Webhook deliveries under crashes (catalogue F1, plus a kill during a delivery load).

A real receiver on 127.0.0.1 records every request. A delivery that is redone after a
crash must carry the same ``webhook-id`` and byte-identical body, with a valid
signature each time, so receivers can deduplicate.
"""

from __future__ import annotations

import signal
import time

import pytest
from standardwebhooks import Webhook

from django_pgqueue.webhooks import verify
from django_pgqueue.webhooks.envelope import envelope_body

from ..support.receiver import Receiver
from .conftest import LEASE, worker_env
from .helpers import backends, paused_fields, query, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.timeout(60), pytest.mark.django_db(transaction=True)]


@pytest.fixture
def receiver():
    with Receiver() as server:
        yield server


def _endpoint(url: str):
    from django_pgqueue.models import Endpoint

    endpoint = Endpoint(url=url)
    endpoint.full_clean()
    endpoint.save()
    return endpoint


def _deliveries_terminal(dsn: str) -> bool:
    rows = query(
        dsn,
        "SELECT count(*) FROM pgqueue_delivery"
        " WHERE status NOT IN ('succeeded', 'dead', 'cancelled')",
    )
    return rows[0][0] == 0


def test_kill9_after_2xx_redelivers_same_id_and_bytes(worker_process, test_dsn, receiver, summary):
    """F1: the receiver answered 200, the worker dies before writing the outcome."""
    from django_pgqueue import send_event
    from django_pgqueue.models import Delivery

    endpoint = _endpoint(receiver.url("/hook"))
    event = send_event("order.paid", {"order_id": 7, "note": "naïve ☃"})
    delivery = Delivery.objects.get(event=event)
    a = worker_process(
        "--concurrency", "1", env=worker_env(PGQUEUE_TEST_PAUSE_AT="after_http_response")
    )
    _, paused_id, token_a = paused_fields(a.wait_line("PAUSED after_http_response"))
    assert paused_id == delivery.pk
    assert len(receiver.hits("/hook")) == 1  # the 2xx happened
    a.kill()
    killed = time.monotonic()
    delivery.refresh_from_db()
    assert (delivery.status, delivery.locked_by) == ("in_progress", token_a)
    b = worker_process("--concurrency", "1", env=worker_env())
    wait_until(lambda: Delivery.objects.get(pk=delivery.pk).status == "succeeded", 15, "redelivery")
    recover = time.monotonic() - killed
    delivery.refresh_from_db()
    assert delivery.attempts == 2 and delivery.locked_by != token_a
    first, second = receiver.hits("/hook")
    sent = envelope_body(event.event_type, event.created_at, event.body)
    assert first.body == second.body == sent
    h1 = {k.lower(): v for k, v in first.headers.items()}
    h2 = {k.lower(): v for k, v in second.headers.items()}
    assert h1["webhook-id"] == h2["webhook-id"] == event.msg_id
    assert h1["webhook-timestamp"] != h2["webhook-timestamp"]
    assert int(h2["webhook-timestamp"]) - int(h1["webhook-timestamp"]) >= int(LEASE) - 1
    for request, headers in ((first, h1), (second, h2)):
        verify(endpoint.secret, request.body, request.headers)
        Webhook(endpoint.secret).verify(request.body, headers)  # independent oracle
    b.signal(signal.SIGTERM)
    assert b.wait(15) == 0
    summary(
        faults=1,
        tasks=1,
        duplicates=1,
        lost=0,
        recover=recover,
        note="kill -9 after a 2xx; same webhook-id, identical body, both signatures valid",
    )


def test_kill9_during_delivery_load_loses_no_message(worker_process, test_dsn, receiver, summary):
    """Two workers deliver 200 events; one is killed mid-run and restarted."""
    from django_pgqueue import send_event
    from django_pgqueue.models import Delivery

    _endpoint(receiver.url("/load"))
    events = [send_event("order.paid", {"n": i}) for i in range(200)]
    env = worker_env(PGQUEUE_LOG_LEVEL="WARNING")
    a = worker_process("--concurrency", "4", env=env)
    b = worker_process("--concurrency", "4", env=env)
    wait_until(lambda: len(receiver.hits("/load")) >= 50, 30, "50 deliveries")
    a.kill()
    killed = time.monotonic()
    a2 = worker_process("--concurrency", "4", env=env)
    wait_until(lambda: _deliveries_terminal(test_dsn), 30, "every delivery terminal")
    recover = time.monotonic() - killed
    assert Delivery.objects.filter(status="succeeded").count() == 200
    by_id: dict[str, set[bytes]] = {}
    for request in receiver.hits("/load"):
        headers = {k.lower(): v for k, v in request.headers.items()}
        by_id.setdefault(headers["webhook-id"], set()).add(request.body)
    assert set(by_id) == {e.msg_id for e in events}  # every message arrived
    assert all(len(bodies) == 1 for bodies in by_id.values())  # redeliveries byte-identical
    duplicates = len(receiver.hits("/load")) - len(events)
    # a2 may still be starting (b can finish the load alone): SIGTERM before the
    # worker installed its handler would kill it outright. Its claim connection
    # opens after the handlers are in place.
    wait_until(lambda: backends(test_dsn, "pgqueue-worker-%") >= 2, 30, "a2 to be running")
    for w in (b, a2):
        w.signal(signal.SIGTERM)
        assert w.wait(15) == 0
    summary(
        faults=1,
        tasks=200,
        duplicates=duplicates,
        lost=0,
        recover=recover,
        note="kill -9 one of two delivering workers",
    )
