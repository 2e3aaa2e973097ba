"""The message queues' minutes in the console's rollup: written by the maintenance
thread's sampler from counters PostgreSQL keeps, for work done through the Python API
and through the SQL API, and never nonsense when queues come, go or start again.

Statistics reach the shared counters when a session goes idle; ``_flush`` makes the
session that did the work publish them before the sample (pg_stat_force_next_flush,
PostgreSQL 15), as any session does on its own within seconds.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.test import override_settings

from django_pgqueue import mq
from django_pgqueue.db import connect, connection_params
from django_pgqueue.models import Rollup
from django_pgqueue.rollup import store as rollup_store

pytestmark = pytest.mark.django_db(transaction=True)


def _flush(conn: Any = None) -> None:
    """Publish the statistics of ``conn``'s session (Django's by default)."""
    if conn is None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_force_next_flush()")
    else:
        conn.execute("SELECT pg_stat_force_next_flush()")


@pytest.fixture
def sampler() -> Iterator[Any]:
    """The sampler's own autocommit connection, as the maintenance thread has."""
    with connect("maintenance") as conn:
        yield conn


def _minute() -> dt.datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT date_trunc('minute', now())")
        return cursor.fetchone()[0]


def _row(name: str, minute: dt.datetime) -> tuple[int, int, int, int | None]:
    """(sent, settled, archived, depth) of ``name``'s minute."""
    row = Rollup.objects.get(kind="mq", name=name, minute=minute)
    assert row.retried == 0
    return row.run_hist[rollup_store.MQ_SENT], row.ok, row.failed, row.depth


def _no_negative_counts() -> None:
    for row in Rollup.objects.filter(kind="mq"):
        assert min(row.ok, row.failed, row.run_hist[rollup_store.MQ_SENT], row.depth) >= 0, row
        assert row.failed <= row.ok


MINUTE = dt.timedelta(minutes=1)


def test_python_api_sends_reads_deletes_and_archives_are_counted(sampler):
    mq.create("orders")
    m0 = _minute()
    assert rollup_store.sample_message_queues(sampler, m0) == 1
    assert _row("orders", m0) == (0, 0, 0, 0)
    mq.send_batch("orders", [{"n": 1}, {"n": 2}, {"n": 3}])
    mq.send("orders", {"n": 4})
    mq.send("orders", {"n": 5}, delay=3600)  # delayed: sent, not visible
    first, second = mq.read("orders", vt=60, qty=2)
    mq.delete("orders", first.msg_id)
    mq.archive("orders", second.msg_id)
    mq.pop("orders")
    _flush()
    assert rollup_store.sample_message_queues(sampler, m0 + MINUTE) == 1
    # 5 sent; deleted, archived, popped: 3 settled, 1 archived; 1 visible, 1 delayed.
    assert _row("orders", m0 + MINUTE) == (5, 3, 1, 1)
    assert rollup_store.sample_message_queues(sampler, m0 + MINUTE) == 0  # sampled already
    assert rollup_store.sample_message_queues(sampler, m0 + 2 * MINUTE) == 1
    assert _row("orders", m0 + 2 * MINUTE) == (0, 0, 0, 1)


@pytest.fixture
def client_conn(sql_api: str) -> Iterator[psycopg.Connection]:
    """A plain psycopg session, as another language's pgmq client has."""
    with psycopg.connect(autocommit=True, **connection_params()) as conn:
        yield conn


def test_sql_api_sends_reads_deletes_and_archives_are_counted(sampler, client_conn):
    api = "pgmq_test"
    client_conn.execute(f"SELECT {api}.create('from_go')")
    m0 = _minute()
    rollup_store.sample_message_queues(sampler, m0)
    client_conn.execute(
        f"SELECT {api}.send_batch('from_go', ARRAY['{{}}', '{{}}', '{{}}']::jsonb[])"
    )
    client_conn.execute(f"SELECT {api}.send('from_go', '{{\"a\": 1}}')")
    ids = [r[0] for r in client_conn.execute(f"SELECT msg_id FROM {api}.read('from_go', 60, 3)")]
    client_conn.execute(f"SELECT {api}.delete('from_go', %s::bigint)", [ids[0]])
    client_conn.execute(f"SELECT {api}.archive('from_go', %s::bigint[])", [ids[1:]])
    _flush(client_conn)
    rollup_store.sample_message_queues(sampler, m0 + MINUTE)
    assert _row("from_go", m0 + MINUTE) == (4, 3, 2, 1)
    client_conn.execute(f"SELECT {api}.pop('from_go')")
    client_conn.execute(f"SELECT {api}.purge_queue('from_go')")
    _flush(client_conn)
    rollup_store.sample_message_queues(sampler, m0 + 2 * MINUTE)
    assert _row("from_go", m0 + 2 * MINUTE) == (0, 1, 0, 0)  # popped; purge found none
    _no_negative_counts()


def test_a_queue_dropped_between_samples_is_left_out(sampler):
    mq.create("stays")
    mq.create("goes")
    m0 = _minute()
    assert rollup_store.sample_message_queues(sampler, m0) == 2
    mq.drop("goes")
    mq.send("stays", {})
    _flush()
    assert rollup_store.sample_message_queues(sampler, m0 + MINUTE) == 1
    assert _row("stays", m0 + MINUTE) == (1, 0, 0, 1)


def test_a_queue_whose_tables_vanish_mid_sample_is_left_out(sampler):
    """The registry row outlives its tables (a drop by hand, or between the counters'
    read and the count): the queue is skipped, the others are written."""
    mq.create("fine")
    mq.create("broken")
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE pgqueue_mq_q_broken, pgqueue_mq_a_broken")
        # A name no queue may have, put in the registry by hand: never an identifier.
        cursor.execute(
            "INSERT INTO pgqueue_mq_queue (name, unlogged, created_at)"
            " VALUES ('bad name\"; --', false, now())"
        )
    m0 = _minute()
    assert rollup_store.sample_message_queues(sampler, m0) == 1
    assert Rollup.objects.filter(kind="mq").get().name == "fine"
    # Gone between the counters' read and the count: the statement of its chunk
    # fails, and the queues of that chunk are counted one by one, without it.
    now = dt.datetime.now(dt.UTC)
    gone = rollup_store.MqCounters("broken", 0, 0, 0, 0, 0, now)
    fine = rollup_store.MqCounters("fine", 0, 0, 0, 0, 0, now)
    mq.send("fine", {})
    assert rollup_store._mq_depths(sampler, [fine, gone]) == {"fine": 1}


def test_a_queue_created_mid_minute_counts_from_its_creation(sampler):
    mq.create("old")
    m0 = _minute()
    rollup_store.sample_message_queues(sampler, m0)
    mq.create("new")  # after the sample of m0
    mq.send_batch("new", [{}, {}, {}, {}])
    mq.archive("new", [m.msg_id for m in mq.read("new", qty=1)])
    _flush()
    rollup_store.sample_message_queues(sampler, m0 + MINUTE)
    assert _row("new", m0 + MINUTE) == (4, 1, 1, 3)


def test_a_queue_dropped_and_created_again_counts_its_new_table_only(sampler):
    mq.create("again")
    mq.send_batch("again", [{}] * 7)
    _flush()
    m0 = _minute()
    rollup_store.sample_message_queues(sampler, m0)
    mq.drop("again")
    mq.create("again")
    mq.send_batch("again", [{}] * 9)  # above the old table's mark of 7
    _flush()
    rollup_store.sample_message_queues(sampler, m0 + MINUTE)
    assert _row("again", m0 + MINUTE) == (9, 0, 0, 9)


def test_counters_started_again_count_from_zero_never_negative(sampler):
    """A sequence restarted (an unlogged queue after a crash) and statistics reset
    (pg_stat_reset, or a crash) leave counters below their marks."""
    mq.create("restarts")
    ids = mq.send_batch("restarts", [{}] * 6)
    mq.delete("restarts", ids[:4])
    _flush()
    m0 = _minute()
    rollup_store.sample_message_queues(sampler, m0)
    mq.delete("restarts", ids[4:])
    _flush()  # published before the reset, so the reset takes them too
    with connection.cursor() as cursor:
        cursor.execute("ALTER SEQUENCE pgqueue_mq_s_restarts RESTART")
        cursor.execute(
            "SELECT pg_stat_reset_single_table_counters('pgqueue_mq_q_restarts'::regclass)"
        )
    mq.send_batch("restarts", [{}, {}])
    mq.delete("restarts", mq.read("restarts", qty=1)[0].msg_id)
    _flush()
    rollup_store.sample_message_queues(sampler, m0 + MINUTE)
    # 2 sent since the restart; 1 deleted since the reset (the 2 before it are lost
    # with the counter, not counted as minus 4).
    assert _row("restarts", m0 + MINUTE) == (2, 1, 0, 1)
    _no_negative_counts()


def test_after_a_gap_the_first_minute_sets_marks_and_counts_nothing(sampler):
    mq.create("idle")
    m0 = _minute()
    rollup_store.sample_message_queues(sampler, m0)
    mq.send_batch("idle", [{}] * 5)
    _flush()
    later = m0 + dt.timedelta(seconds=rollup_store.MQ_MAX_GAP_SECONDS) + MINUTE
    rollup_store.sample_message_queues(sampler, later)
    assert _row("idle", later) == (0, 0, 0, 5)  # five minutes of sends are not one minute's
    mq.send("idle", {})
    rollup_store.sample_message_queues(sampler, later + MINUTE)
    assert _row("idle", later + MINUTE) == (1, 0, 0, 6)


def test_a_queue_of_a_million_messages_is_sampled_by_a_bounded_count(sampler):
    mq.create("big")
    m0 = _minute()
    rollup_store.sample_message_queues(sampler, m0)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_mq_q_big (vt, message)"
            " SELECT now(), '{}' FROM generate_series(1, 1000000)"
        )
    _flush()
    started = time.perf_counter()
    rollup_store.sample_message_queues(sampler, m0 + MINUTE)
    seconds = time.perf_counter() - started
    sent, settled, archived, depth = _row("big", m0 + MINUTE)
    assert (sent, settled, archived, depth) == (1_000_000, 0, 0, 1_000_000)
    assert seconds < 1.0, f"a sample of one queue of a million took {seconds:.2f} s"


def test_two_workers_sampling_one_minute_count_it_once(sampler):
    mq.create("shared")
    m0 = _minute()
    rollup_store.sample_message_queues(sampler, m0)
    mq.send_batch("shared", [{}] * 3)
    with connect("maintenance") as other:
        assert rollup_store.sample_message_queues(other, m0 + MINUTE) == 1
    assert rollup_store.sample_message_queues(sampler, m0 + MINUTE) == 0
    assert Rollup.objects.filter(kind="mq", minute=m0 + MINUTE).count() == 1
    assert _row("shared", m0 + MINUTE)[0] == 3


@override_settings(PGQUEUE={"MAINTENANCE_INTERVAL": 0.2})
def test_a_running_worker_samples_the_message_queues(run_worker):
    mq.create("watched")
    mq.send_batch("watched", [{}] * 2)
    run_worker(burst=False, housekeeping=True)
    deadline = time.monotonic() + 20
    while not Rollup.objects.filter(kind="mq", name="watched").exists():
        assert time.monotonic() < deadline, "no worker sampled the message queue"
        time.sleep(0.1)
    row = Rollup.objects.get(kind="mq", name="watched")
    assert row.minute == _minute() or row.minute == _minute() - MINUTE
    assert row.depth == 2


@override_settings(PGQUEUE={"ROLLUP": False, "MAINTENANCE_INTERVAL": 0.2})
def test_with_the_rollup_off_no_worker_samples(run_worker):
    mq.create("unwatched")
    worker = run_worker(burst=False, housekeeping=True)
    deadline = time.monotonic() + 10
    while worker.housekeeping_thread is None or worker.housekeeping_thread.passes < 3:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert not Rollup.objects.filter(kind="mq").exists()


def test_a_partitioned_archive_is_counted_over_its_partitions(sampler):
    """The archive's inserted-rows counter of a partitioned archive is its partitions'
    (the parent itself holds no rows, and PostgreSQL counts none for it)."""
    mq.create("kept", archive_retention=dt.timedelta(days=7))
    m0 = _minute()
    assert rollup_store.sample_message_queues(sampler, m0) == 1
    mq.send_batch("kept", [{"n": 1}, {"n": 2}])
    first, second = mq.read("kept", vt=60, qty=2)
    mq.archive("kept", [first.msg_id, second.msg_id])
    _flush()
    assert rollup_store.sample_message_queues(sampler, m0 + MINUTE) == 1
    assert _row("kept", m0 + MINUTE) == (2, 2, 2, 0)
