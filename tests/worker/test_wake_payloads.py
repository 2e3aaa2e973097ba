"""A NOTIFY names the worker source its work is for, and wakes only that source.

At a steady offered rate every claim pass follows a NOTIFY. When any NOTIFY made
every quiet source be asked again, each pass was a claim per source (jobs, atomic
jobs, deliveries) instead of one, and a job's pickup waited for all of them.
"""

from __future__ import annotations

import threading
import time
import uuid
from types import SimpleNamespace

import pytest
from django.db import transaction

from django_pgqueue import enqueue_many, send_event
from django_pgqueue.db import connect
from django_pgqueue.notify import WAKE_ALL, WAKE_ATOMIC, WAKE_DELIVERIES, WAKE_JOBS, notifier
from django_pgqueue.worker.atomic import AtomicJobSource
from django_pgqueue.worker.claim_state import QuietSources
from django_pgqueue.worker.listener import Listener
from django_pgqueue.worker.sources import JobSource
from testproject.demo import tasks

from ..conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def payloads():
    """Every payload NOTIFYed on the queue's channel while the test runs."""
    conn = connect("test-listen", prepare=False)
    conn.execute("LISTEN pgqueue")

    def heard(expected: int) -> list[str]:
        got: list[str] = []

        def more() -> bool:
            got.extend(n.payload for n in conn.notifies(timeout=0.2))
            return len(got) >= expected

        wait_for(more, 10, f"{expected} NOTIFY(s)")
        got.extend(n.payload for n in conn.notifies(timeout=0.3))  # and no more
        return got

    yield heard
    conn.close()


def test_the_sources_are_named_by_their_payloads():
    assert JobSource.name == WAKE_JOBS
    assert AtomicJobSource.name == WAKE_ATOMIC
    from django_pgqueue.webhooks.delivery_source import DeliverySource

    assert DeliverySource.name == WAKE_DELIVERIES


def test_an_enqueue_names_the_source_of_its_job(payloads):
    tasks.add.enqueue(1, 2)
    assert payloads(1) == [WAKE_JOBS]
    tasks.record_atomic.enqueue(label=f"wake-{uuid.uuid4()}")
    assert payloads(1) == [WAKE_ATOMIC]
    enqueue_many(tasks.add, [((i, i), {}) for i in range(3)])
    assert payloads(1) == [WAKE_JOBS]


def test_one_transaction_with_two_kinds_of_work_wakes_both(payloads):
    with transaction.atomic():
        tasks.add.enqueue(1, 2)
        tasks.record_atomic.enqueue(label=f"wake-{uuid.uuid4()}")
    assert sorted(payloads(2)) == sorted([WAKE_JOBS, WAKE_ATOMIC])


def test_an_event_with_deliveries_names_the_delivery_source(payloads, settings):
    from django_pgqueue.models import Endpoint

    from ..webhooks.conftest import FAST_WEBHOOKS

    settings.PGQUEUE = {**settings.PGQUEUE, "WEBHOOKS": FAST_WEBHOOKS}
    endpoint = Endpoint(url="http://127.0.0.1:9/hook")
    endpoint.full_clean()
    endpoint.save()
    send_event("order.paid", {"order_id": 1})
    assert payloads(1) == [WAKE_DELIVERIES]


def test_the_listener_keeps_what_each_notify_named():
    wake, stopping = threading.Event(), threading.Event()
    channel = f"pgq_wake_{uuid.uuid4().hex[:8]}"
    listener = Listener(
        channel=channel,
        also=[f"{channel}_mq"],
        wake=wake,
        stopping=stopping,
        worker_id="wake-test",
        dsn=None,
        health_interval=10.0,
        test_hooks=frozenset(),
    )
    listener.start()
    try:
        assert listener.connected.wait(10)
        # The sweep after connecting names every source.
        wait_for(lambda: WAKE_ALL in listener.take_heard(), 5, "the sweep")
        with connect("test-notify", prepare=False) as conn:
            conn.execute("SELECT pg_notify(%s, %s)", (channel, WAKE_DELIVERIES))
            conn.execute("SELECT pg_notify(%s, '')", (f"{channel}_mq",))
        heard: set[str] = set()

        def both() -> bool:
            heard.update(listener.take_heard())
            return len(heard) >= 2

        wait_for(both, 10, "both notifications")
        assert heard == {WAKE_DELIVERIES, f"{channel}_mq"}
        assert wake.is_set()
        assert listener.take_heard() == set()
    finally:
        stopping.set()
        listener.join(10)


def _source(name: str, *channels: str) -> SimpleNamespace:
    return SimpleNamespace(name=name, channels=channels)


def test_a_notify_for_one_source_leaves_the_quiet_others_quiet():
    sources = [_source(WAKE_JOBS), _source(WAKE_ATOMIC), _source("consumer", "pgqueue_mq_x")]
    quiet = QuietSources(60.0, sources)
    for source in sources:
        quiet.claimed(source.name, 0)  # every source came back empty
    assert all(quiet.skip(s.name) for s in sources)

    quiet.refresh({WAKE_JOBS}, set())
    assert not quiet.skip(WAKE_JOBS)
    assert quiet.skip(WAKE_ATOMIC) and quiet.skip("consumer")

    quiet.refresh({"pgqueue_mq_x"}, set())  # a message queue's own channel
    assert not quiet.skip("consumer") and quiet.skip(WAKE_ATOMIC)

    quiet.refresh({WAKE_ALL}, set())  # pg_notify from SQL, an older release, the sweep
    assert not quiet.skip(WAKE_ATOMIC)


def test_the_relay_is_woken_by_the_deliveries_a_fan_out_writes():
    from django_pgqueue.webhooks.relay_source import RelaySource

    relay = SimpleNamespace(name=RelaySource.name, wakes_on=RelaySource.wakes_on, channels=())
    quiet = QuietSources(60.0, [_source(WAKE_JOBS), relay])
    quiet.claimed(RelaySource.name, 0)
    quiet.refresh({WAKE_JOBS}, set())
    assert quiet.skip(RelaySource.name)
    quiet.refresh({WAKE_DELIVERIES}, set())
    assert not quiet.skip(RelaySource.name)


def test_a_quiet_source_is_asked_again_after_its_poll_interval():
    sources = [_source(WAKE_JOBS), _source(WAKE_DELIVERIES)]
    quiet = QuietSources(0.05, sources)
    quiet.claimed(WAKE_DELIVERIES, 0)
    quiet.refresh({WAKE_JOBS}, set())
    assert quiet.skip(WAKE_DELIVERIES)
    time.sleep(0.06)
    assert not quiet.skip(WAKE_DELIVERIES)


def test_a_lone_source_is_always_asked():
    quiet = QuietSources(60.0, [_source(WAKE_JOBS)])
    quiet.claimed(WAKE_JOBS, 0)
    assert not quiet.skip(WAKE_JOBS)


@pytest.fixture(autouse=True)
def _flush_notifier():
    yield
    notifier.flush()
