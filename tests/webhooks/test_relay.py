"""The relay: a relay endpoint's events reach the broker in batches, in event order,
each message id exactly once, even when the worker is killed (``kill -9``) mid-batch.

Against the machine's NATS JetStream (a fresh stream per test; skipped loudly when
NATS is down), with real worker processes.
"""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError

from django_pgqueue import send_event
from django_pgqueue.models import Delivery, DeliveryAttempt, Endpoint
from django_pgqueue.webhooks import verify

from ..conftest import wait_for
from .test_brokers import amqp_url, rabbit, stream  # noqa: F401  (fixtures: a fresh stream, exchange)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("webhooks_conf")]

BATCH = 20


def relay_env(**extra: str) -> dict[str, str]:
    return {
        "PGQUEUE_TEST_WEBHOOKS": json.dumps({"RELAY_BATCH_SIZE": BATCH}),
        "PGQUEUE_LEASE_SECONDS": "2",
        "PGQUEUE_POLL_INTERVAL": "0.1",
        **extra,
    }


def test_a_relay_endpoint_needs_a_broker_destination(make_endpoint):
    with pytest.raises(ValidationError) as refused:
        make_endpoint("http://127.0.0.1:9/hook", relay=True)
    assert "broker destination" in str(refused.value)


def test_killed_mid_batch_the_relay_sends_every_event_once_in_order(
    stream,  # noqa: F811
    make_endpoint,
    worker_process,
):
    endpoint = make_endpoint(f"nats://127.0.0.1:4222?subject={stream['subject']}", relay=True)
    keys = ["cust-a", "cust-b", "cust-c"]
    events = [
        send_event("order.updated", {"n": n}, ordering_key=keys[n % 3]) for n in range(3 * BATCH)
    ]
    first = worker_process(
        "--queues",
        "webhooks",
        env=relay_env(PGQUEUE_TEST_HOOKS="1", PGQUEUE_TEST_PAUSE_AT="after_http_response"),
    )

    # Let the first batch and half the second go out, then kill -9 the worker with
    # the second batch published in part and not recorded.
    def paused(count: int) -> bool:
        return sum(line.startswith("PAUSED after_http_response") for line in first.lines) >= count

    published = BATCH + BATCH // 2
    for n in range(published):
        wait_for(lambda n=n: paused(n + 1), timeout=30, what=f"publish {n + 1}")
        first.resume()
    wait_for(lambda: paused(published + 1), timeout=30, what="the next publish")
    first.kill()
    sent_before_kill = len(stream["messages"]())
    assert BATCH + BATCH // 2 <= sent_before_kill < 3 * BATCH

    worker_process("--queues", "webhooks", env=relay_env())
    wait_for(
        lambda: Delivery.objects.filter(status="succeeded").count() == len(events),
        timeout=60,
        what="every relay delivery confirmed",
    )
    messages = stream["messages"]()
    # Exactly once per message id (JetStream de-duplicates the resent part of the
    # killed batch on Nats-Msg-Id) and in event order.
    assert [m.headers["Nats-Msg-Id"] for m in messages] == [e.msg_id for e in events]
    for message, event in zip(messages, events, strict=True):
        assert message.data == event.request_body().encode()
        verify(endpoint.secret, message.data, message.headers)
    # The killed batch's deliveries were sent again: their LeaseExpired entries, then
    # a confirmed attempt, the resent ones acked as duplicates.
    lapsed = DeliveryAttempt.objects.filter(error__startswith="LeaseExpired")
    assert lapsed.count() >= 1
    duplicates = DeliveryAttempt.objects.filter(response_body__contains="duplicate").count()
    assert duplicates >= 1, "nothing of the killed batch was sent again"
    # The batches were claimed as batches: far fewer claims than deliveries.
    assert Endpoint.objects.get(pk=endpoint.pk).relay


def test_a_failing_head_holds_back_the_rest_of_its_batch(
    stream,  # noqa: F811
    make_endpoint,
    run_worker,
    webhooks_conf,
):
    # A subject no stream stores: every publish fails (no responders). The first
    # delivery's failure ends the batch; the rest are given back unsent, unlogged.
    # Its retry is a minute away: a burst worker sees nothing it could send (the rest
    # wait behind the head) and exits instead of polling until then.
    webhooks_conf(RETRY_SCHEDULE=[60])
    make_endpoint("nats://127.0.0.1:4222?subject=pgq.relay.nowhere", relay=True)
    events = [send_event("order.updated", {"n": n}) for n in range(5)]
    run_worker(burst=True, timeout=30)
    attempts = list(DeliveryAttempt.objects.order_by("id"))
    assert [a.delivery.event_id for a in attempts] == [events[0].pk]
    assert "no JetStream stream" in attempts[0].error
    waiting = Delivery.objects.exclude(event=events[0])
    assert {d.attempts for d in waiting} == {0}
    assert {d.status for d in waiting} == {"pending"}
    assert Delivery.objects.get(event=events[0]).status == "failed"


def test_a_rabbitmq_relay_publishes_in_event_order(
    rabbit,  # noqa: F811
    make_endpoint,
    run_worker,
    webhooks_conf,
):
    webhooks_conf(RELAY_BATCH_SIZE=7)  # several batches, the last one short
    make_endpoint(amqp_url(rabbit["exchange"]), relay=True)
    events = [send_event("order.updated", {"n": n}, ordering_key=f"k{n % 2}") for n in range(30)]
    run_worker(burst=True)
    assert Delivery.objects.filter(status="succeeded").count() == len(events)
    received = []
    while True:
        method, properties, _body = rabbit["channel"].basic_get(rabbit["queue"], auto_ack=True)
        if method is None:
            break
        received.append(properties.message_id)
    assert received == [e.msg_id for e in events]


def test_each_relayed_delivery_is_counted_in_the_delivery_metrics(
    rabbit,  # noqa: F811
    make_endpoint,
    run_worker,
    webhooks_conf,
):
    pytest.importorskip("prometheus_client")
    from django_pgqueue.metrics import WorkerMetrics
    from django_pgqueue.worker.observers import attempt_observers

    webhooks_conf(RELAY_BATCH_SIZE=4)  # 10 events: batches of 4, 4 and 2
    make_endpoint(amqp_url(rabbit["exchange"]), relay=True)
    for n in range(10):
        send_event("order.updated", {"n": n})
    metrics = WorkerMetrics(queue_gauges=False)
    attempt_observers.append(metrics.observe_attempt)
    try:
        run_worker(burst=True)
    finally:
        attempt_observers.remove(metrics.observe_attempt)
    assert Delivery.objects.filter(status="succeeded").count() == 10
    delivered = metrics.registry.get_sample_value(
        "pgqueue_deliveries_total", {"status_class": "confirmed"}
    )
    assert delivered == 10  # one per delivery, not one per batch, and not an "error"
    batches = metrics.registry.get_sample_value(
        "pgqueue_attempts_total", {"source": "relay", "task": "relay", "outcome": "succeeded"}
    )
    assert batches is None or batches <= 10
