"""The worker side of message queues, called directly on a worker connection: what each
outcome does to a message, the ``read_ct`` fence on every write, the read-back that
settles an ambiguous commit, and queues missing or dropped under a running worker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from django_pgqueue import mq
from django_pgqueue.db import connect
from django_pgqueue.mq import store
from django_pgqueue.mq.consumers import Consumer
from django_pgqueue.mq.source import MessageSource

from .conftest import table_rows

pytestmark = pytest.mark.django_db(transaction=True)

ALL = {"all_queues": True, "queues": []}


def _handler(message: Any) -> None:
    return None


def _source(*queues: str, vt: float = 30, time_limit: float | None = None) -> MessageSource:
    registered = {q: Consumer(q, _handler, vt, 10, False, time_limit) for q in queues}
    return MessageSource("test-worker", registered, lease=5)


@pytest.fixture
def conn() -> Iterator[Any]:
    with connect("mq-source-test") as conn:
        yield conn


def _visible_in(name: str, msg_id: int) -> tuple[int, float]:
    """(read_ct, seconds until visible) of one message."""
    with store._cursor() as cursor:
        cursor.execute(
            f"SELECT read_ct, EXTRACT(epoch FROM vt - clock_timestamp())::float8 "
            f"FROM pgqueue_mq_q_{name} WHERE msg_id = %s",
            [msg_id],
        )
        return cursor.fetchone()


def test_each_outcome_settles_its_message(conn):
    mq.create("settled")
    ids = mq.send_batch("settled", [{"n": n} for n in range(4)])
    source = _source("settled")
    items = source.claim(conn, {**ALL, "limit": 10})
    assert [item.message.msg_id for item in items] == ids
    assert all(item.message.read_ct == 1 for item in items)
    archived, deleted, retried, released = items
    outcomes = [
        source._outcome(archived, "succeeded", "archive", 0.0),
        source._outcome(deleted, "succeeded", "delete", 0.0),
        source._outcome(retried, "failed", "retry", 60.0),
        source.release(released, "shutdown"),
    ]
    assert source.write_outcomes(conn, outcomes) == {item.id for item in items}
    assert [row[0] for row in store.browse("settled", archived=True)] == [archived.message.msg_id]
    assert [row[0] for row in store.browse("settled")] == [retried.message.msg_id, ids[3]]
    read_ct, wait = _visible_in("settled", retried.message.msg_id)
    assert read_ct == 1 and 50 < wait <= 60  # hidden for the retry's delay, the read counted
    read_ct, wait = _visible_in("settled", released.message.msg_id)
    assert read_ct == 0 and wait <= 0  # visible at once, the read not counted
    # Written and forgotten: a repeated write changes nothing.
    assert source.write_outcomes(conn, outcomes) == set()


def test_a_message_read_again_is_fenced_off_from_every_write(conn):
    mq.create("fenced")
    mid = mq.send("fenced", {"n": 1})
    source = _source("fenced")
    (item,) = source.claim(conn, {**ALL, "limit": 10})
    assert source.read_outcomes(conn, [item.id]) == {item.id: ("in_progress", item.token)}
    assert source.extend_leases(conn, [item.id], [item.token], 30) == {item.id}
    assert _visible_in("fenced", mid)[1] > 25

    # Another reader takes the message (its lease lapsed): read_ct moves on.
    mq.set_vt("fenced", mid, 0)
    assert [m.read_ct for m in mq.read("fenced", vt=30)] == [2]
    assert source.read_outcomes(conn, [item.id]) == {item.id: ("in_progress", None)}
    assert source.extend_leases(conn, [item.id], [item.token], 300) == set()
    assert _visible_in("fenced", mid)[1] <= 30  # not extended
    done = source._outcome(item, "succeeded", "archive", 0.0)
    assert source.write_outcomes(conn, [done]) == set()
    assert table_rows("pgqueue_mq_a_fenced") == 0 and mq.metrics("fenced").queue_length == 1


def test_an_archived_message_reads_back_as_done(conn):
    mq.create("readback")
    mq.send_batch("readback", [{"n": 1}, {"n": 2}])
    source = _source("readback")
    first, second = source.claim(conn, {**ALL, "limit": 10})
    # What an ambiguous commit leaves: the write landed, its answer was lost.
    mq.archive("readback", first.message.msg_id)
    assert source.read_outcomes(conn, [first.id, second.id]) == {
        first.id: ("done", first.token),
        second.id: ("in_progress", second.token),
    }


def test_past_its_time_limit_a_message_is_not_extended(conn):
    mq.create("limited_src")
    mq.send("limited_src", {"n": 1})
    source = _source("limited_src", time_limit=0.001)
    (item,) = source.claim(conn, {**ALL, "limit": 10})
    item.started -= 1
    assert source.extend_leases(conn, [item.id], [item.token], 300) == set()


def test_any_due_and_queues_missing_or_dropped_under_the_worker(conn):
    mq.create("present")
    source = _source("absent", "present")
    assert not source.any_due(conn, ALL)
    assert source.claim(conn, {**ALL, "limit": 10}) == []
    assert "absent" in source._missing  # left alone for a while, not asked every pass
    mq.send("present", {"n": 1})
    assert source.any_due(conn, ALL)

    # Dropped behind the cached options' back: the read finds no table, the cached
    # entry is forgotten and the claim goes on without it.
    assert "present" in store._cache
    with store._cursor() as cursor:
        cursor.execute("DROP TABLE pgqueue_mq_q_present")
    assert source.claim(conn, {**ALL, "limit": 10}) == []
    assert "present" not in store._cache
