"""The reads' scan floor, the consumers' and the SQL API's: a message queue's reads stay
cheap while a session holds back the xmin horizon, and a message below the floor
still goes at the next full read.

A pinned snapshot keeps the dead versions of every message read and archived since
it began; a read walks the primary key from its head and fetches each one to find it
dead. A floored read finds its candidates by a range of the ``vt`` index instead
(mq/sql.py, ``_FLOOR``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from io import StringIO
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.db import transaction
from psycopg import ClientCursor

from django_pgqueue import mq
from django_pgqueue.db import connect
from django_pgqueue.mq import store
from django_pgqueue.mq.consumers import Consumer
from django_pgqueue.mq.source import MessageSource
from django_pgqueue.scan_floor import ScanFloor

pytestmark = pytest.mark.django_db(transaction=True)

CHURNED = 4000


@pytest.fixture
def conn() -> Iterator[psycopg.Connection]:
    with connect("mq-floor-test", prepare=True) as conn:
        yield conn


@pytest.fixture
def fast_full_reads(monkeypatch: pytest.MonkeyPatch) -> ScanFloor:
    monkeypatch.setattr(ScanFloor, "FULL_EVERY", 0.5)
    monkeypatch.setattr(ScanFloor, "FULL_SHARE", 1.0)
    return ScanFloor()


def churn(conn: psycopg.Connection, name: str, n: int) -> None:
    """Messages sent, read and archived as consumers leave them: each a dead version
    at the head of the primary key (sent, then read) and in the ``vt`` index."""
    table, archive = f"pgqueue_mq_q_{name}", f"pgqueue_mq_a_{name}"
    conn.execute(
        f"INSERT INTO {table} (vt, message) SELECT clock_timestamp() - interval '60 s',"
        " '{}'::jsonb FROM generate_series(1, %s)",
        [n],
    )
    conn.execute(f"UPDATE {table} SET vt = clock_timestamp() + interval '30 s', read_ct = 1")
    conn.execute(
        f"""WITH gone AS (DELETE FROM {table} RETURNING *)
        INSERT INTO {archive} ({store.sql.MESSAGE_COLUMNS})
        SELECT {store.sql.MESSAGE_COLUMNS} FROM gone"""
    )


def buffers(conn: psycopg.Connection, info: store.QueueInfo, floor: float | None) -> int:
    """Shared buffers one read touches, by EXPLAIN (ANALYZE), rolled back."""
    query, params = store.read_query(info, 30, 1, floor)
    conn.execute("BEGIN")
    try:
        with ClientCursor(conn) as cur:
            cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query, params)
            (plan,) = cur.fetchone()
    finally:
        conn.execute("ROLLBACK")
    if isinstance(plan, str):
        plan = json.loads(plan)
    top = plan[0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])


@pytest.mark.parametrize("dead_letters", [None, "archive", "queue"])
def test_a_pinned_horizon_does_not_make_a_floored_read_walk_the_dead_head(conn, dead_letters):
    if dead_letters == "queue":
        mq.create("pinned_dlq")
    mq.create(
        "pinned",
        max_reads=None if dead_letters is None else 5,
        dead_letter="pinned_dlq" if dead_letters == "queue" else None,
    )
    info = store.get_queue("pinned")
    with connect("mq-floor-pin", prepare=False) as pin:
        pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        pin.execute("SELECT count(*) FROM pgqueue_mq_q_pinned").fetchone()
        churn(conn, "pinned", CHURNED)
        conn.execute("VACUUM pgqueue_mq_q_pinned")  # removes nothing the pin can see
        mq.send("pinned", {"new": True})
        full = min(buffers(conn, info, None) for _ in range(2))
        floored = min(buffers(conn, info, 2.0) for _ in range(2))
        pin.execute("ROLLBACK")
    # Without the floor: a heap fetch for each dead version (two a message) under the
    # primary key's head, once: the write of the picked row is one probe (it was a
    # join that walked the whole table again: 16,056 buffers).
    assert 2 * CHURNED <= full < 3 * CHURNED, full
    assert floored * 20 < full, (floored, full)  # measured: 19 against 8,035


def test_a_message_below_the_floor_goes_at_the_next_full_read(conn, fast_full_reads):
    mq.create("floored")
    info = store.get_queue("floored")
    floors = fast_full_reads
    assert store.claim(conn, info, 30, 10, floors) == []  # full, and short: caught up
    (old,) = mq.send_batch("floored", [{"old": True}])
    conn.execute(
        "UPDATE pgqueue_mq_q_floored SET vt = clock_timestamp() - interval '30 s'"
        " WHERE msg_id = %s",
        [old],
    )
    (new,) = mq.send_batch("floored", [{"new": True}])

    # Between full reads: only what became visible since the last one.
    assert [m.msg_id for m in store.claim(conn, info, 30, 10, floors)] == [new]

    # The next full read takes the rest: a message below the floor waits, never lost.
    time.sleep(0.5)
    assert [m.msg_id for m in store.claim(conn, info, 30, 10, floors)] == [old]
    read_cts = conn.execute("SELECT msg_id, read_ct FROM pgqueue_mq_q_floored").fetchall()
    assert sorted(read_cts) == sorted([(old, 1), (new, 1)])


def test_a_floored_read_takes_a_message_whose_visibility_timeout_ran_out(conn, fast_full_reads):
    """A message read and neither archived nor deleted comes back at its ``vt``, which
    is after the floor, whatever its msg_id: floored reads take it."""
    mq.create("redelivered")
    info = store.get_queue("redelivered")
    floors = fast_full_reads
    (first,) = mq.send_batch("redelivered", [{"n": 1}])
    assert [m.msg_id for m in store.claim(conn, info, 0.3, 10, floors)] == [first]  # full
    (second,) = mq.send_batch("redelivered", [{"n": 2}])
    time.sleep(0.35)
    assert floors.age("mq:redelivered", time.monotonic()) is not None  # a floored read
    taken = store.claim(conn, info, 30, 10, floors)
    assert [(m.msg_id, m.read_ct) for m in taken] == [(first, 2), (second, 1)]


def test_floored_reads_keep_the_dead_letter_policy(conn, fast_full_reads):
    """The floored variants of both dead-letter reads move a message read max_reads
    times and return the others, with their parameters in the right places."""
    mq.create("dlq")
    mq.create("to_queue", max_reads=1, dead_letter="dlq")
    mq.create("to_archive", max_reads=1)
    for name in ("to_queue", "to_archive"):
        info = store.get_queue(name)
        floors = fast_full_reads
        (dead,) = mq.send_batch(name, [{"dead": True}])
        assert [m.msg_id for m in store.claim(conn, info, 0.2, 10, floors)] == [dead]
        (live,) = mq.send_batch(name, [{"live": True}])
        time.sleep(0.25)
        assert floors.age("mq:" + name, time.monotonic()) is not None
        assert [m.msg_id for m in store.claim(conn, info, 30, 10, floors)] == [live]
        assert [m.msg_id for m in store.claim(conn, info, 30, 10)] == []
    assert [m.message for m in mq.read("dlq", qty=10)] == [{"dead": True}]
    archived = conn.execute("SELECT message FROM pgqueue_mq_a_to_archive").fetchall()
    assert archived == [({"dead": True},)]


def _handler(message: Any) -> None:
    return None


def test_the_worker_source_reads_above_the_claim_loops_floor(conn, fast_full_reads):
    """The consumers' claim takes the claim loop's floor from its parameters, one
    state per queue."""
    mq.create("one")
    mq.create("two")
    registered = {q: Consumer(q, _handler, 30, 10, False, None) for q in ("one", "two")}
    source = MessageSource("floor-worker", registered, lease=5)
    params = {"all_queues": True, "queues": [], "limit": 10, "scan_floor": fast_full_reads}
    assert source.claim(conn, params) == []
    assert fast_full_reads.age("mq:one", time.monotonic()) is not None
    assert fast_full_reads.age("mq:two", time.monotonic()) is not None
    (old,) = mq.send_batch("one", [{"old": True}])
    conn.execute(
        "UPDATE pgqueue_mq_q_one SET vt = clock_timestamp() - interval '30 s' WHERE msg_id = %s",
        [old],
    )
    (new,) = mq.send_batch("two", [{"new": True}])
    assert [item.message.msg_id for item in source.claim(conn, params)] == [new]
    time.sleep(0.5)
    assert [item.message.msg_id for item in source.claim(conn, params)] == [old]


# ---- The SQL API's read: the same floor, its state kept per session --------------


@pytest.fixture
def sql_api() -> Iterator[None]:
    call_command("pgqueue_install_sql_api", "--schema", "pgmq_floor", stdout=StringIO())
    yield
    call_command(
        "pgqueue_install_sql_api", "--schema", "pgmq_floor", "--uninstall", stdout=StringIO()
    )


def heap_blocks_of_one_read(conn: psycopg.Connection, name: str, conditional: str) -> int:
    """Heap blocks of the queue table one ``pgmq_floor.read`` touches (this
    transaction's own statistics), and that it returned one message."""
    with conn.transaction():
        table = f"pgqueue_mq_q_{name}"
        query = "SELECT pg_stat_get_xact_blocks_fetched(%s::regclass)"
        (before,) = conn.execute(query, [table]).fetchone()
        rows = conn.execute(
            "SELECT msg_id FROM pgmq_floor.read(%s, 30, 1, %s::jsonb)", [name, conditional]
        ).fetchall()
        (after,) = conn.execute(query, [table]).fetchone()
    assert len(rows) == 1
    return after - before


def test_the_sql_api_reads_above_the_sessions_floor_under_a_pinned_horizon(conn, sql_api):
    mq.create("sqlpin")
    with connect("mq-floor-pin", prepare=False) as pin:
        pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        pin.execute("SELECT count(*) FROM pgqueue_mq_q_sqlpin").fetchone()
        churn(conn, "sqlpin", CHURNED)
        conn.execute("VACUUM pgqueue_mq_q_sqlpin")
        # A full read that comes back short: the witness that nothing older waits.
        assert conn.execute("SELECT * FROM pgmq_floor.read('sqlpin', 30, 1)").fetchall() == []
        mq.send_batch("sqlpin", [{"n": 1}, {"n": 1}])
        # A conditional read neither uses nor moves the floor: from the head.
        full = heap_blocks_of_one_read(conn, "sqlpin", '{"n": 1}')
        floored = heap_blocks_of_one_read(conn, "sqlpin", "{}")
        pin.execute("ROLLBACK")
    assert full > CHURNED / 4, full
    assert floored * 20 < full, (floored, full)


def test_the_sql_apis_floor_holds_back_no_message_for_longer_than_a_full_read(conn, sql_api):
    mq.create("sqlfloor")
    read = "SELECT msg_id FROM pgmq_floor.read('sqlfloor', 30, 10)"
    assert conn.execute(read).fetchall() == []  # full, short: the floor is set
    (old, new) = mq.send_batch("sqlfloor", [{"old": True}, {"new": True}])
    conn.execute(
        "UPDATE pgqueue_mq_q_sqlfloor SET vt = clock_timestamp() - interval '30 s'"
        " WHERE msg_id = %s",
        [old],
    )
    assert conn.execute(read).fetchall() == [(new,)]  # floored: only the recent one
    # The next full read is due FULL_EVERY after the last one began, or later if it
    # was slow (FULL_SHARE): at most FULL_EVERY_MAX. Make it due now.
    setting = "'pgqueue_floor.q' || md5('sqlfloor')"
    (state,) = conn.execute(f"SELECT current_setting({setting})").fetchone()
    witness, next_full = (float(part) for part in state.split(" "))
    (now,) = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    assert now - 5 < witness <= now
    assert witness + ScanFloor.FULL_EVERY - 1 < next_full <= now + ScanFloor.FULL_EVERY_MAX
    conn.execute(f"SELECT set_config({setting}, %s, false)", [f"{witness} 0"])
    assert conn.execute(read).fetchall() == [(old,)]  # the next full read: never lost
    # Another session has no floor of its own yet: it reads from the head.
    (older,) = mq.send_batch("sqlfloor", [{"older": True}])
    conn.execute(
        "UPDATE pgqueue_mq_q_sqlfloor SET vt = clock_timestamp() - interval '30 s'"
        " WHERE msg_id = %s",
        [older],
    )
    with connect("mq-floor-other", prepare=False) as other:
        assert other.execute(read).fetchall() == [(older,)]


# ---- mq.read: the process's floor, for reads that are their own transaction ------


def test_mq_read_outside_a_transaction_reads_above_the_processs_floor(monkeypatch):
    monkeypatch.setattr(ScanFloor, "FULL_EVERY", 0.5)
    monkeypatch.setattr(ScanFloor, "FULL_SHARE", 1.0)
    mq.create("plain")
    assert mq.read("plain", qty=10) == []  # full, short: the floor is set
    (old, new) = mq.send_batch("plain", [{"old": True}, {"new": True}])
    with connect("mq-floor-old", prepare=False) as conn:
        conn.execute(
            "UPDATE pgqueue_mq_q_plain SET vt = clock_timestamp() - interval '30 s'"
            " WHERE msg_id = %s",
            [old],
        )
    # Inside transaction.atomic the snapshot may be older than the read: no floor.
    with transaction.atomic():
        assert [m.msg_id for m in mq.read("plain", qty=10)] == [old, new]
        transaction.set_rollback(True)
    assert [m.msg_id for m in mq.read("plain", qty=10)] == [new]  # floored
    time.sleep(0.5)
    assert [m.msg_id for m in mq.read("plain", qty=10)] == [old]  # the next full read
    # Dropping the queue forgets its floor: a new queue of that name reads in full.
    mq.drop("plain")
    mq.create("plain")
    (again,) = mq.send_batch("plain", [{"again": True}])
    with connect("mq-floor-old", prepare=False) as conn:
        conn.execute("UPDATE pgqueue_mq_q_plain SET vt = clock_timestamp() - interval '30 s'")
    assert [m.msg_id for m in mq.read("plain", qty=10)] == [again]
