"""The official Python client, ``pgmq`` 1.1.4 (PyPI), against django_pgqueue's SQL API.

The package ships no test suite, so this drives every method it exposes, sync and
async, through the client itself. Run by ``scripts/pgmq_client_suite.sh`` in the
client's own virtualenv (the project does not depend on the client):

    PG_DATABASE=<db> python -m pytest -q scripts/pgmq_clients/test_pgmq_python.py

The database must hold the SQL API in schema ``pgmq`` (``pgqueue_install_sql_api``).
What the API refuses (partitions by msg_id, pgmq's default intervals) is checked to
be refused naming why, never left as "function does not exist".
"""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import os
import uuid

import psycopg
import pytest
from pgmq import AsyncPGMQueue, SyncPGMQueue

DB = {
    "host": os.environ.get("PG_HOST", "127.0.0.1"),
    "port": os.environ.get("PG_PORT", "5432"),
    "database": os.environ["PG_DATABASE"],
    "username": os.environ.get("PG_USERNAME", "postgres"),
    "password": os.environ.get("PG_PASSWORD", "postgres"),
}


@pytest.fixture(scope="module")
def client():
    # The client's documented option for a pgmq that is not the extension.
    queue = SyncPGMQueue(**DB, init_extension=False)
    yield queue
    queue.close()


@pytest.fixture
def name(client):
    queue = "t_" + uuid.uuid4().hex[:12]
    client.create_queue(queue)
    yield queue
    client.drop_queue(queue)


# The failed construction leaves the client's pool open (the client's own leak): its
# finalizer complains when collected, here rather than in a later test.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_construction_checks_the_extension_unless_told_not_to():
    # The client's default runs CREATE EXTENSION pgmq, which is not installed: the
    # SQL API is plain functions. init_extension=False (or PG_INIT_EXTENSION=false).
    with pytest.raises(psycopg.Error, match='extension "pgmq"'):
        SyncPGMQueue(**DB)
    gc.collect()
    SyncPGMQueue(**DB, init_extension=False).close()


def test_queues_are_created_listed_validated_and_dropped(client):
    queue = "t_" + uuid.uuid4().hex[:12]
    client.create_queue(queue)
    client.create_queue(queue + "_u", unlogged=True)
    with pytest.warns(UserWarning):
        records = {r.queue_name: r for r in client.list_queues()}
    assert not records[queue].is_unlogged and records[queue + "_u"].is_unlogged
    assert not records[queue].is_partitioned
    assert client.validate_queue_name(queue)
    with pytest.raises(psycopg.Error, match="must be letters"):
        client.validate_queue_name("bad name; --")
    # pgmq's default intervals partition by msg_id: refused, naming why.
    with pytest.raises(psycopg.Error, match=r"numeric intervals .* are not supported"):
        client.create_partitioned_queue(queue + "_p")
    # Time intervals: the archive is partitioned by day and kept for the retention.
    client.create_partitioned_queue(
        queue + "_p", partition_interval="1 day", retention_interval="7 days"
    )
    with pytest.warns(UserWarning):
        records = {r.queue_name: r for r in client.list_queues()}
    assert records[queue + "_p"].is_partitioned and not records[queue].is_partitioned
    msg_id = client.send(queue + "_p", {"kept": "7 days"})
    assert client.archive(queue + "_p", msg_id) is True
    assert client.drop_queue(queue + "_p") is True
    client.detach_archive(queue)
    assert client.drop_queue(queue) is True
    assert client.drop_queue(queue + "_u") is True
    assert client.drop_queue(queue) is False


def test_send_in_every_form_and_read(client, name):
    ids = [
        client.send(name, {"n": 1}),
        client.send(name, {"n": 2}, headers={"h": 1}),
        client.send(name, {"n": 3}, delay=0),
        client.send(name, {"n": 4}, headers={"h": 2}, delay=0),
        client.send(name, {"n": 5}, delay=dt.datetime.now(dt.UTC)),
        client.send(name, {"n": 6}, headers={}, delay=dt.datetime.now(dt.UTC)),
        client.send(name, {"n": 7}, delay=3600),
    ]
    assert ids == sorted(ids) and len(set(ids)) == 7
    first = client.read(name, vt=30)
    assert first.msg_id == ids[0] and first.message == {"n": 1} and first.read_ct == 1
    assert first.last_read_at is not None and first.vt > first.last_read_at
    batch = client.read_batch(name, vt=30, batch_size=10)
    assert [m.message["n"] for m in batch] == [2, 3, 4, 5, 6]
    assert batch[0].headers == {"h": 1} and batch[2].headers == {"h": 2}
    assert client.read(name) is None  # the 7th is delayed
    assert client.read_with_poll(name, vt=30, qty=1, max_poll_seconds=1, poll_interval_ms=50) == []


def test_send_batch_in_every_form(client, name):
    now = dt.datetime.now(dt.UTC)
    sent = [
        client.send_batch(name, [{"b": 1}, {"b": 2}]),
        client.send_batch(name, [{"b": 3}], headers=[{"x": 3}]),
        client.send_batch(name, [{"b": 4}], delay=0),
        client.send_batch(name, [{"b": 5}], delay=now),
        client.send_batch(name, [{"b": 6}], headers=[{"x": 6}], delay=0),
        client.send_batch(name, [{"b": 7}], headers=[{"x": 7}], delay=now),
    ]
    assert [len(ids) for ids in sent] == [2, 1, 1, 1, 1, 1]
    assert client.send_batch(name, []) == []
    got = client.read(name, vt=30, qty=10)
    assert [m.message["b"] for m in got] == [1, 2, 3, 4, 5, 6, 7]
    assert [m.headers for m in got][2::3] == [{"x": 3}, {"x": 6}]


def test_conditional_read_and_read_with_poll(client, name):
    client.send_batch(name, [{"k": 1}, {"k": 2}])
    (two,) = client.read(name, vt=30, qty=5, conditional={"k": 2})
    assert two.message == {"k": 2}
    (one,) = client.read_with_poll(name, vt=30, qty=5, max_poll_seconds=1, conditional={"k": 1})
    assert one.message == {"k": 1}


def test_pop_one_or_many(client, name):
    assert client.pop(name) is None
    client.send_batch(name, [{"p": i} for i in range(4)])
    assert client.pop(name).message == {"p": 0}
    assert [m.message["p"] for m in client.pop(name, qty=5)] == [1, 2, 3]
    assert client.metrics(name).queue_length == 0


def test_delete_archive_and_purge(client, name):
    ids = client.send_batch(name, [{"d": i} for i in range(6)])
    assert client.delete(name, ids[0]) is True
    assert client.delete(name, ids[0]) is False
    assert sorted(client.delete_batch(name, ids[1:3])) == ids[1:3]
    assert client.archive(name, ids[3]) is True
    assert sorted(client.archive_batch(name, ids[4:])) == ids[4:]
    client.send_batch(name, [{}, {}])
    assert client.purge(name) == 2


def test_set_vt_with_seconds_a_timestamp_and_arrays(client, name):
    ids = client.send_batch(name, [{"v": 1}, {"v": 2}])
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    assert client.set_vt(name, ids[0], later).vt == later
    assert client.set_vt(name, ids[0], 0).msg_id == ids[0]
    moved = client.set_vt(name, ids, 3600)
    assert sorted(m.msg_id for m in moved) == ids
    assert client.read(name) is None
    assert sorted(m.msg_id for m in client.set_vt(name, ids, dt.datetime.now(dt.UTC))) == ids
    assert client.set_vt(name, 10**12, 0) is None


def test_metrics(client, name):
    client.send_batch(name, [{}, {}, {}])
    client.read(name, vt=30)
    m = client.metrics(name)
    assert (m.queue_name, m.queue_length, m.queue_visible_length, m.total_messages) == (
        name,
        3,
        2,
        3,
    )
    assert name in {x.queue_name for x in client.metrics_all()}
    with pytest.raises(psycopg.Error, match="does not exist"):
        client.metrics("t_missing_queue")


def test_insert_notification(client, name):
    client.enable_notify(name, throttle_interval_ms=0)
    throttles = {t.queue_name: t for t in client.list_notify_throttles()}
    assert throttles[name].throttle_interval_ms == 0
    client.update_notify(name, 1000)
    assert {t.queue_name: t.throttle_interval_ms for t in client.list_notify_throttles()}[
        name
    ] == 1000
    with psycopg.connect(conninfo=client.config.dsn, autocommit=True) as listen:
        listen.execute(f'LISTEN "pgmq.q_{name}.INSERT"')
        client.send(name, {"wake": 1})
        assert [n.channel for n in listen.notifies(timeout=2, stop_after=1)] == [
            f"pgmq.q_{name}.INSERT"
        ]
    client.disable_notify(name)
    assert name not in {t.queue_name for t in client.list_notify_throttles()}
    with pytest.raises(psycopg.Error, match="not have insert notification enabled"):
        client.update_notify(name, 10)


def test_an_existing_archive_is_converted_to_day_partitions(client, name):
    # pgmq's default intervals partition by msg_id: refused, naming why.
    with pytest.raises(psycopg.Error, match=r"numeric intervals .* are not supported"):
        client.convert_archive_partitioned(name)
    before = client.send(name, {"archived": "before"})
    assert client.archive(name, before) is True
    client.convert_archive_partitioned(
        name, partition_interval="1 day", retention_interval="7 days"
    )
    with pytest.warns(UserWarning):
        records = {r.queue_name: r for r in client.list_queues()}
    assert records[name].is_partitioned
    after = client.send(name, {"archived": "after"})
    assert client.archive(name, after) is True
    # Both archived messages are in the partitioned archive: nothing moved or was lost.
    with psycopg.connect(conninfo=client.config.dsn, autocommit=True) as conn:
        kept = conn.execute(f'SELECT msg_id FROM "pgqueue_mq_a_{name}" ORDER BY msg_id')
        assert [row[0] for row in kept] == [before, after]


def _grouped(client, name):
    """Groups A (A1, A2) and B (B1), sent A1, B1, A2 with the client's own send."""
    for label, group in [("A1", "A"), ("B1", "B"), ("A2", "A")]:
        client.send(name, {"label": label}, headers={"x-pgmq-group": group})


def _labels(messages):
    return [m.message["label"] for m in messages]


def test_grouped_reads_keep_each_group_in_order(client, name):
    _grouped(client, name)
    assert _labels(client.read_grouped(name, vt=30, qty=5)) == ["A1", "A2", "B1"]
    assert client.read_grouped(name, vt=30, qty=5) == []
    other = name + "_rr"
    client.create_queue(other)
    try:
        _grouped(client, other)
        assert _labels(client.read_grouped_rr(other, vt=30, qty=1)) == ["A1"]
        # A1 is in flight: A2 waits, B1 is handed out.
        assert _labels(
            client.read_grouped_rr_with_poll(other, vt=30, qty=5, max_poll_seconds=1)
        ) == ["B1"]
        assert client.read_grouped_with_poll(other, vt=30, qty=5, max_poll_seconds=1) == []
        client.create_fifo_index(other)
        client.create_fifo_indexes_all()
    finally:
        client.drop_queue(other)


def test_topic_routing(client, name):
    other = name + "_t"
    client.create_queue(other)
    try:
        assert client.validate_routing_key("a.b") is True
        assert client.validate_routing_key("a..b") is False
        assert client.validate_topic_pattern("a.*") is True
        assert client.validate_topic_pattern("a.**") is False
        client.bind_topic("a.*", name)
        client.bind_topic("a.#", other)
        assert sorted(b.pattern for b in client.list_topic_bindings()) == ["a.#", "a.*"]
        assert [b.queue_name for b in client.list_topic_bindings(other)] == [other]
        assert sorted(r.queue_name for r in client.test_routing("a.b")) == sorted([name, other])
        assert client.send_topic("a.b", {"n": 1}) == 2
        assert client.send_topic("a.b.c", {"n": 2}, headers={"h": 1}) == 1
        assert client.send_topic("a.b", {"n": 3}, delay=0) == 2
        assert client.send_topic("a.b", {"n": 4}, headers={"h": 2}, delay=0) == 2
        sent = client.send_batch_topic("a.x", [{"n": 5}, {"n": 6}])
        assert len(sent) == 4
        assert len(client.send_batch_topic("a.x", [{"n": 7}], headers=[{"h": 3}])) == 2
        assert len(client.send_batch_topic("a.x", [{"n": 8}], delay=0)) == 2
        now = dt.datetime.now(dt.UTC)
        assert len(client.send_batch_topic("a.x", [{"n": 9}], delay=now)) == 2
        assert len(client.send_batch_topic("a.x", [{"n": 10}], headers=[{}], delay=now)) == 2
        assert [m.message["n"] for m in client.read_batch(other, vt=30, batch_size=20)] == list(
            range(1, 11)
        )
        assert client.unbind_topic("a.#", other) is True
        assert client.unbind_topic("a.#", other) is False
    finally:
        client.drop_queue(other)


def test_transactions_of_the_client(client, name):
    from pgmq.decorators import transaction

    @transaction
    def send_then_fail(queue, conn=None):
        queue.send(name, {"t": 1}, conn=conn)
        raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        send_then_fail(client)
    assert client.metrics(name).queue_length == 0


def test_the_async_client():
    async def run() -> None:
        queue = AsyncPGMQueue(**DB, init_extension=False)
        await queue.init()
        name = "t_" + uuid.uuid4().hex[:12]
        try:
            await queue.create_queue(name)
            mid = await queue.send(name, {"a": 1}, headers={"h": 1})
            assert await queue.send_batch(name, [{"a": 2}, {"a": 3}], delay=0)
            msg = await queue.read(name, vt=30)
            assert (msg.msg_id, msg.message, msg.headers) == (mid, {"a": 1}, {"h": 1})
            assert msg.last_read_at is not None
            assert [
                m.message["a"] for m in await queue.read_with_poll(name, qty=5, max_poll_seconds=1)
            ] == [2, 3]
            assert (await queue.set_vt(name, mid, 0)).msg_id == mid
            assert (await queue.pop(name)).msg_id == mid
            assert (await queue.metrics(name)).queue_length == 2
            assert await queue.archive(name, mid + 1) is True
            assert await queue.delete(name, mid + 2) is True
            await queue.enable_notify(name, 0)
            await queue.disable_notify(name)
            assert await queue.purge(name) == 0
            await queue.bind_topic("as.#", name)
            assert await queue.send_topic("as.x", {"a": 4}, headers={"x-pgmq-group": "g"}) == 1
            assert len(await queue.send_batch_topic("as.y", [{"a": 5}])) == 1
            assert [r.queue_name for r in await queue.test_routing("as.z")] == [name]
            assert [m.message["a"] for m in await queue.read_grouped(name, vt=30, qty=1)] == [4]
            assert [m.message["a"] for m in await queue.read_grouped_rr(name, vt=30, qty=5)] == [5]
            await queue.create_fifo_index(name)
            assert await queue.unbind_topic("as.#", name) is True
        finally:
            await queue.drop_queue(name)
            await queue.close()

    asyncio.run(run())
