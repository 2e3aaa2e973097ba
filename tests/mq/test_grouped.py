"""FIFO group reads at both doors: pgmq's three orders, a group never split while a
message of it is in flight (also between two concurrent readers), and the FIFO
index."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections, transaction

from django_pgqueue import mq

from .test_sql_api import one

pytestmark = pytest.mark.django_db(transaction=True)


def fill(name: str = "g") -> dict[int, str]:
    """Groups A (3 messages), B (2), the default group (1), interleaved; msg_id -> label."""
    mq.create(name)
    labels = {}
    for label, group in [
        ("A1", "A"),
        ("B1", "B"),
        ("A2", "A"),
        ("D1", None),
        ("B2", "B"),
        ("A3", "A"),
    ]:
        headers = {mq.GROUP_HEADER: group} if group else None
        labels[mq.send(name, {"label": label}, headers=headers)] = label
    return labels


def labels(messages) -> list[str]:
    return [m.message["label"] for m in messages]


def test_read_grouped_fills_from_the_oldest_group():
    fill()
    assert labels(mq.read_grouped("g", vt=30, qty=4)) == ["A1", "A2", "A3", "B1"]
    # A and B each have a message in flight: only the default group is eligible.
    assert labels(mq.read_grouped("g", vt=30, qty=4)) == ["D1"]
    assert mq.read_grouped("g", vt=30, qty=4) == []


def test_read_grouped_rr_interleaves_groups():
    fill()
    assert labels(mq.read_grouped_rr("g", vt=30, qty=5)) == ["A1", "B1", "D1", "A2", "B2"]
    assert mq.read_grouped_rr("g", vt=30, qty=5) == []


def test_read_grouped_head_takes_one_per_group_and_waits_for_the_head():
    ids = fill()
    first = mq.read_grouped_head("g", vt=30, qty=10)
    assert labels(first) == ["A1", "B1", "D1"]
    assert mq.read_grouped_head("g", vt=30, qty=10) == []
    # Deleting A's head releases A's next message, in order; B stays held by B1.
    a1 = next(i for i, label in ids.items() if label == "A1")
    mq.delete("g", a1)
    assert labels(mq.read_grouped_head("g", vt=30, qty=10)) == ["A2"]
    # A lapsed visibility timeout hands the same head out again, never the next one.
    b1 = next(i for i, label in ids.items() if label == "B1")
    mq.set_vt("g", b1, 0)
    assert [(m.message["label"], m.read_ct) for m in mq.read_grouped_head("g", 30, 10)] == [
        ("B1", 2)
    ]


def test_a_delayed_head_holds_its_group_back():
    mq.create("g")
    mq.send("g", {"label": "late"}, delay=3600, headers={mq.GROUP_HEADER: "x"})
    mq.send("g", {"label": "next"}, headers={mq.GROUP_HEADER: "x"})
    assert mq.read_grouped("g", vt=30, qty=5) == []
    assert labels(mq.read("g", qty=5)) == ["next"]  # plain reads ignore groups


def test_two_readers_never_split_a_group():
    """Reader one holds A1 in an open transaction; reader two, concurrently, must not
    take A2 (it would be processed before A1 is done) but may take B1."""
    fill()
    held = threading.Event()
    release = threading.Event()
    first: list[str] = []

    def reader_one():
        try:
            with transaction.atomic():
                first.extend(labels(mq.read_grouped_head("g", vt=30, qty=1)))
                held.set()
                release.wait(10)
        finally:
            connections.close_all()

    thread = threading.Thread(target=reader_one)
    thread.start()
    assert held.wait(10)
    try:
        second = labels(mq.read_grouped("g", vt=30, qty=10))
    finally:
        release.set()
        thread.join(10)
    assert first == ["A1"]
    assert "A2" not in second and "A3" not in second
    assert second == ["B1", "B2", "D1"]


def test_sql_api_reads_as_python(sql_api):
    fill()
    rows = one("SELECT message->>'label', read_ct FROM pgmq_test.read_grouped_rr('g', 30, 5)")
    assert rows == [("A1", 1), ("B1", 1), ("D1", 1), ("A2", 1), ("B2", 1)]
    assert one("SELECT * FROM pgmq_test.read_grouped('g', 30, 5)") == []
    mq.create("h")
    mq.send("h", {"label": "x1"}, headers={mq.GROUP_HEADER: "x"})
    mq.send("h", {"label": "x2"}, headers={mq.GROUP_HEADER: "x"})
    assert one("SELECT message->>'label' FROM pgmq_test.read_grouped('h', 30, 5)") == [
        ("x1",),
        ("x2",),
    ]
    mq.send("h", {"label": "y1"}, headers={mq.GROUP_HEADER: "y"})
    assert one("SELECT message->>'label' FROM pgmq_test.read_grouped_head('h', 30, 5)") == [("y1",)]
    for kind in ("read_grouped", "read_grouped_rr", "read_grouped_head"):
        assert one(f"SELECT * FROM pgmq_test.{kind}_with_poll('h', 30, 5, 0, 10)") == []


def test_with_poll_returns_when_a_group_has_something():
    fill()
    assert labels(mq.read_grouped_head_with_poll("g", vt=30, qty=1, max_poll_seconds=1)) == ["A1"]
    assert labels(mq.read_grouped_rr_with_poll("g", vt=30, qty=1, max_poll_seconds=1)) == ["B1"]
    assert labels(mq.read_grouped_with_poll("g", vt=30, qty=1, max_poll_seconds=1)) == ["D1"]
    assert mq.read_grouped_with_poll("g", vt=30, qty=1, max_poll_seconds=0.2) == []


def test_queue_with_max_reads_and_bad_arguments_are_refused(sql_api):
    mq.create("dl", max_reads=3)
    with pytest.raises(mq.QueueError, match="max_reads"):
        mq.read_grouped("dl")
    with pytest.raises(Exception, match="max_reads"), transaction.atomic():
        one("SELECT * FROM pgmq_test.read_grouped_rr('dl', 30, 1)")
    with pytest.raises(ValueError, match="qty"):
        mq.read_grouped_head("dl", qty=0)
    with pytest.raises(mq.QueueNotFound):
        mq.read_grouped("missing")
    with pytest.raises(Exception, match="does not exist"), transaction.atomic():
        one("SELECT * FROM pgmq_test.read_grouped('missing', 30, 1)")


def _index_of(table: str) -> list[str]:
    return [
        name
        for (name,) in one(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s ORDER BY indexname", table
        )
    ]


def test_fifo_index_is_created_at_both_doors_and_used(sql_api):
    fill()
    mq.create("other")
    mq.create_fifo_index("g")
    mq.create_fifo_index("g")  # idempotent
    assert "pgqueue_mq_g_g" in _index_of("pgqueue_mq_q_g")
    one("SELECT pgmq_test.create_fifo_indexes_all()")
    assert "pgqueue_mq_g_other" in _index_of("pgqueue_mq_q_other")
    one("SELECT pgmq_test.create_fifo_index('other')")
    with pytest.raises(Exception, match="does not exist"), transaction.atomic():
        one("SELECT pgmq_test.create_fifo_index('missing')")
    # With the index, the heads are found without a sort of the whole queue.
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        cursor.execute(
            "EXPLAIN SELECT DISTINCT ON (COALESCE(headers ->> 'x-pgmq-group'::text,"
            " '_default_fifo_group'::text)) msg_id FROM pgqueue_mq_q_g ORDER BY"
            " COALESCE(headers ->> 'x-pgmq-group'::text, '_default_fifo_group'::text), msg_id"
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("RESET enable_seqscan")
    assert "pgqueue_mq_g_g" in plan
