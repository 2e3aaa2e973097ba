"""A broker killed (``kill -9``) mid-run and started again: 0 lost, duplicates only
with the same message id.

Each test starts a broker of its own (tests/support/private_brokers.py) on a free port
with its store in the test's directory: the machine's brokers are shared with other
test runs and are never restarted. The worker delivers while the broker dies; events
sent while it is down fail their attempts (connection refused) and are retried; once
it is back, every delivery is confirmed. Then the broker holds every event exactly as
signed, and any message stored twice carries the same id and the same bytes.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from django_pgqueue import send_event
from django_pgqueue.models import Delivery, DeliveryAttempt, Event
from django_pgqueue.webhooks import verify

from ..conftest import wait_for
from ..support.private_brokers import PrivateNats, PrivateRabbit, nats_server, rabbitmq_server

# The run's own waits (the first deliveries 60 s, a failed attempt 30 s, the broker's
# start up to 60 s, every delivery confirmed 120 s) name what was missing when one
# runs out; the suite's 120-second timeout would cut them short on a loaded machine
# (a private RabbitMQ alone can take a minute to start) with only a stack dump.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

BEFORE = 150  # events sent before the kill, delivered while the broker dies
DURING = 50  # events sent while the broker is down


#: Retries that outlast the downtime and a breaker that reopens soon (the broker is down
#: for a few seconds), for the test and for its worker process.
#: A short total deadline: a publish in flight when the broker dies waits for its ack
#: until the deadline (nats-py does not fail it when the connection closes), and the
#: test waits 30 s for the first failed attempt.
SURVIVE_RESTART = {
    "CONNECT_TIMEOUT": 2.0,
    "TOTAL_TIMEOUT": 5.0,
    # Fast retries, then slower ones that outlast a broker slow to start on a loaded
    # machine (RabbitMQ's VM took longer than the 8 s of fast ones once, in a full
    # parallel run): a delivery that used up its attempts would be dead, not late.
    "RETRY_SCHEDULE": [0.2] * 40 + [1.0] * 60,
    "RETRY_JITTER": 0,
    "BREAKER_THRESHOLD": 5,
    "BREAKER_COOLDOWN": 0.5,
    "BREAKER_MAX_COOLDOWN": 1.0,
}


@pytest.fixture
def survive_restart(webhooks_conf: Any) -> None:
    webhooks_conf(**SURVIVE_RESTART)


def succeeded() -> int:
    return Delivery.objects.filter(status="succeeded").count()


def failed_attempts() -> int:
    """Attempts that failed (a note alone, such as a resend on a fresh connection, is a
    delivered attempt)."""
    return DeliveryAttempt.objects.exclude(error="").exclude(error__startswith="note: ").count()


def run_through_a_restart(broker: Any, worker_process: Any) -> list[Event]:
    """Send BEFORE events, kill the broker once some are delivered, send DURING more,
    start it again, and wait until every delivery succeeded.

    The worker is a process of its own (``runworkers``), as in production: the test
    process only sends, kills and reads."""
    events = [send_event("order.paid", {"n": n}) for n in range(BEFORE)]
    worker_process(
        "--concurrency",
        "4",
        "--queues",
        "webhooks",
        env={
            "PGQUEUE_TEST_WEBHOOKS": json.dumps(SURVIVE_RESTART),
            "PGQUEUE_POLL_INTERVAL": "0.1",
        },
    )
    wait_for(lambda: succeeded() >= BEFORE // 4, 60, "the first deliveries")
    broker.kill()
    events += [send_event("order.paid", {"n": BEFORE + n}) for n in range(DURING)]
    wait_for(lambda: failed_attempts() > 0, 30, "an attempt to fail")
    broker.start()
    total = BEFORE + DURING
    wait_for(lambda: succeeded() == total, 120, "every delivery to be confirmed")
    assert not Delivery.objects.exclude(status="succeeded").exists()
    return events


def private_broker(kind: Any, binary: str | None, name: str, tmp_path: Any) -> Iterator[Any]:
    if binary is None:
        pytest.skip(f"SKIPPED LOUDLY: {name} is not installed; the restart test needs it")
    broker = kind(tmp_path)
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture
def private_nats(tmp_path: Any) -> Iterator[Any]:
    yield from private_broker(PrivateNats, nats_server(), "nats-server", tmp_path)


def test_nats_restarted_mid_run_loses_nothing_and_stores_each_message_once(
    private_nats, survive_restart, make_endpoint, worker_process
):
    name = f"PGQ_RESTART_{uuid.uuid4().hex[:8].upper()}"
    subject = f"pgq.restart.{name.lower()}"
    import nats

    loop = asyncio.new_event_loop()

    async def create() -> None:
        nc = await nats.connect(private_nats.url)
        await nc.jetstream().add_stream(name=name, subjects=[subject], storage="file")
        await nc.close()

    loop.run_until_complete(create())
    endpoint = make_endpoint(f"nats://127.0.0.1:{private_nats.port}?subject={subject}")
    events = run_through_a_restart(private_nats, worker_process)

    async def read() -> list[Any]:
        nc = await nats.connect(private_nats.url)
        js = nc.jetstream()
        info = await js.stream_info(name)
        messages = [await js.get_msg(name, s) for s in range(1, info.state.last_seq + 1)]
        await nc.close()
        return messages

    messages = loop.run_until_complete(read())
    loop.close()
    by_id = {e.msg_id: e for e in events}
    ids = Counter(m.headers["Nats-Msg-Id"] for m in messages)
    assert set(ids) == set(by_id), "lost: " + repr(sorted(set(by_id) - set(ids))[:5])
    # JetStream de-duplicates on Nats-Msg-Id: a retry of a publish it had stored is
    # acked as a duplicate, never stored twice.
    assert max(ids.values()) == 1
    for message in messages:
        event = by_id[message.headers["Nats-Msg-Id"]]
        assert message.data == event.request_body().encode()
        verify(endpoint.secret, message.data, message.headers)
    assert failed_attempts() > 0, "no attempt met the dead broker: the test proved nothing"


@pytest.fixture
def private_rabbit(tmp_path: Any) -> Iterator[Any]:
    yield from private_broker(PrivateRabbit, rabbitmq_server(), "rabbitmq-server", tmp_path)


def test_rabbitmq_restarted_mid_run_loses_nothing_and_repeats_only_the_same_id(
    private_rabbit, survive_restart, make_endpoint, worker_process
):
    import pika

    def channel() -> Any:
        connection = pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", private_rabbit.port)
        )
        return connection, connection.channel()

    # Durable exchange and queue, persistent messages: a publisher confirm then means
    # written to disk, and the kill loses nothing the broker confirmed.
    connection, ch = channel()
    ch.exchange_declare("orders", "direct", durable=True)
    ch.queue_declare("orders", durable=True)
    ch.queue_bind("orders", "orders", routing_key="k")
    connection.close()
    endpoint = make_endpoint(private_rabbit.url("orders", "k"))
    events = run_through_a_restart(private_rabbit, worker_process)

    connection, ch = channel()
    received: list[tuple[Any, bytes]] = []
    while True:
        method, properties, body = ch.basic_get("orders", auto_ack=True)
        if method is None:
            break
        received.append((properties, body))
    connection.close()
    by_id = {e.msg_id: e for e in events}
    ids = Counter(p.message_id for p, _ in received)
    assert set(ids) == set(by_id), "lost: " + repr(sorted(set(by_id) - set(ids))[:5])
    # RabbitMQ has no de-duplication: a publish whose confirm was lost with the
    # connection is sent again, so a message may be there twice, always with the
    # same id and the same signed bytes (consumers de-duplicate on message_id).
    for properties, body in received:
        event = by_id[properties.message_id]
        assert body == event.request_body().encode()
        headers = {
            k: v.decode() if isinstance(v, bytes) else v for k, v in properties.headers.items()
        }
        verify(endpoint.secret, body, headers)
    duplicates = sum(n - 1 for n in ids.values())
    print(f"rabbitmq restart: {len(received)} messages, {duplicates} duplicates")
    assert failed_attempts() > 0, "no attempt met the dead broker: the test proved nothing"
