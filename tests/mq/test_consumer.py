"""Consumers in ``runworkers``: the visibility timeout is the lease; a killed consumer's
message reappears after it and is handled, none lost; failures and dead letters."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from django_pgqueue import mq
from django_pgqueue.mq.consumers import unregister

from ..conftest import wait_for
from .conftest import table_rows

pytestmark = pytest.mark.django_db(transaction=True)

handled: list[tuple[int, int]] = []


@pytest.fixture
def consumer() -> Iterator[None]:
    handled.clear()

    @mq.consumer("inproc", vt=5, batch=3)
    def handle(message: mq.Message) -> None:
        handled.append((message.msg_id, message.read_ct))
        if message.message.get("fail"):
            raise ValueError("bad message")

    yield
    unregister("inproc")


def test_handled_messages_are_archived_and_failures_become_dead_letters(consumer, run_worker):
    mq.create("inproc_dead")
    mq.create("inproc", max_reads=1, dead_letter="inproc_dead")
    ids = mq.send_batch("inproc", [{"n": n} for n in range(7)])
    bad = mq.send("inproc", {"fail": True})
    worker = run_worker(burst=True, lease_seconds=5)
    assert sorted(handled) == sorted((i, 1) for i in [*ids, bad])
    assert table_rows("pgqueue_mq_a_inproc") == 7
    assert worker.outcomes == {"succeeded": 7, "failed": 1}
    # The failed message is hidden for the visibility timeout, then read again: a
    # read beyond max_reads moves it to the dead-letter queue instead.
    (left,) = mq.store.browse("inproc")
    assert (left[0], left[1]) == (bad, 1)
    mq.set_vt("inproc", bad, 0)
    run_worker(burst=True, lease_seconds=5)
    assert mq.metrics("inproc").queue_length == 0
    assert [m.message for m in mq.read("inproc_dead")] == [{"fail": True}]


def test_delete_option_and_queue_filter(run_worker):
    handled.clear()

    @mq.consumer("deleting", vt=5, delete=True)
    def handle(message: mq.Message) -> None:
        handled.append((message.msg_id, message.read_ct))

    try:
        mq.create("deleting")
        mq.send_batch("deleting", [{"n": 1}, {"n": 2}])
        run_worker(burst=True, queues=["other"])
        assert handled == [] and mq.metrics("deleting").queue_length == 2
        run_worker(burst=True)
        assert len(handled) == 2
        assert mq.metrics("deleting").queue_length == 0 and table_rows("pgqueue_mq_a_deleting") == 0
    finally:
        unregister("deleting")


@pytest.mark.fault
@pytest.mark.timeout(120)
def test_kill_9_of_a_consumer_the_message_reappears_after_vt_and_is_handled(worker_process):
    mq.create("demo_work")
    mq.create("demo_done")
    hang = mq.send("demo_work", {"hang_reads": 1})
    ids = [hang, *mq.send_batch("demo_work", [{"n": n} for n in range(20)])]
    env = {
        "DEMO_MQ_CONSUMERS": "1",
        "PGQUEUE_LEASE_SECONDS": "2",
        "PGQUEUE_POLL_INTERVAL": "0.5",
        "PGQUEUE_LOG_LEVEL": "INFO",
    }
    first = worker_process("--concurrency", "2", env=env)
    first.wait_line(f"HANDLING {hang} 1", timeout=60)
    first.kill()  # SIGKILL while the handler holds the message

    # The killed worker's message is still hidden (its lease was extended).
    with mq.store._cursor() as cursor:
        cursor.execute("SELECT read_ct FROM pgqueue_mq_q_demo_work WHERE msg_id = %s", [hang])
        assert cursor.fetchone() == (1,)

    second = worker_process("--concurrency", "2", env=env)

    def done() -> set[int]:
        rows = mq.store.browse("demo_done", limit=1000)
        return {mq.Message.from_row(row).message["msg_id"] for row in rows}

    wait_for(lambda: done() >= set(ids), 60, "every message handled")
    records = [m.message for m in mq.read("demo_done", vt=300, qty=1000)]
    handled_ids = [r["msg_id"] for r in records]
    lost = set(ids) - set(handled_ids)
    assert not lost, f"{len(lost)} messages lost"
    assert {r["read_ct"] for r in records if r["msg_id"] == hang} == {2}
    second.signal(15)
    assert second.wait(30) == 0, second.output()
    assert mq.metrics("demo_work").queue_length == 0
    assert table_rows("pgqueue_mq_a_demo_work") == len(ids)


def test_past_its_time_limit_a_handler_loses_its_message_and_cannot_archive_it(run_worker):
    """The lease is not extended past time_limit: the message is read again, and the
    slow first handler's archive is fenced off by read_ct (the second one's counts)."""
    import threading
    import time

    calls: list[int] = []
    slow_done = threading.Event()

    @mq.consumer("limited", vt=1, time_limit=0.3)
    def handle(message: mq.Message) -> None:
        calls.append(message.read_ct)
        if message.read_ct == 1:
            time.sleep(2.5)
            slow_done.set()

    try:
        mq.create("limited")
        mid = mq.send("limited", {"slow": True})
        run_worker(burst=False, lease_seconds=1, poll_interval=0.2)
        wait_for(lambda: 2 in calls, 15, "the message read again after its time limit")
        assert slow_done.wait(10)
        wait_for(lambda: mq.metrics("limited").queue_length == 0, 10, "the second read archived")
        archived = mq.store.browse("limited", archived=True)
        assert [(row[0], row[1]) for row in archived] == [(mid, 2)]
    finally:
        unregister("limited")
