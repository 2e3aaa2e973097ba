"""The Python API of message queues: pgmq's semantics, transactions, storage, bad input."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction

from django_pgqueue import mq
from django_pgqueue.conf import get_settings

from ..conftest import wait_for
from .conftest import table_rows

pytestmark = pytest.mark.django_db


def test_send_read_archive_delete_pop_and_metrics():
    mq.create("emails")
    first = mq.send("emails", {"to": "a@example.com"}, headers={"trace": "t1"})
    rest = mq.send_batch("emails", [{"n": 1}, [2, 3]])
    assert rest == [first + 1, first + 2]

    read = mq.read("emails", vt=30, qty=2)
    assert [m.msg_id for m in read] == [first, first + 1]
    assert read[0].message == {"to": "a@example.com"} and read[0].headers == {"trace": "t1"}
    assert all(m.read_ct == 1 and m.vt > m.enqueued_at for m in read)
    # Hidden for vt seconds: the next read gets only the third message.
    assert [m.message for m in mq.read("emails", vt=30, qty=5)] == [[2, 3]]
    assert mq.read("emails", vt=30, qty=5) == []

    assert mq.archive("emails", [first]) == [first]
    assert mq.delete("emails", first + 1) == [first + 1]
    assert mq.delete("emails", [first + 1]) == []  # already gone
    assert table_rows("pgqueue_mq_a_emails") == 1

    metrics = mq.metrics("emails")
    assert (metrics.queue_name, metrics.queue_length, metrics.total_messages) == ("emails", 1, 3)
    assert metrics.queue_visible_length == 0 and metrics.oldest_msg_age_sec == 0

    # set_vt(0) makes the hidden message visible at once; pop reads and deletes it.
    assert mq.set_vt("emails", first + 2, 0).msg_id == first + 2
    popped = mq.pop("emails")
    assert [m.message for m in popped] == [[2, 3]] and mq.metrics("emails").queue_length == 0
    assert mq.purge("emails") == 0
    assert [q.name for q in mq.list_queues()] == ["emails"]
    assert [m.queue_name for m in mq.metrics_all()] == ["emails"]


def test_a_message_not_deleted_in_time_is_read_again_with_its_count():
    mq.create("retry")
    mid = mq.send("retry", {"job": 1})
    assert mq.read("retry", vt=0.2)[0].read_ct == 1
    again = wait_for(lambda: mq.read("retry", vt=30), 5, "the message to reappear")
    assert (again[0].msg_id, again[0].read_ct) == (mid, 2)


def test_delay_in_seconds_or_as_a_datetime():
    mq.create("later")
    mq.send("later", {"a": 1}, delay=60)
    mq.send("later", {"b": 1}, delay=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    mq.send_batch("later", [{"c": 1}], delay=60)
    assert mq.read("later", qty=10) == []
    assert mq.metrics("later").queue_length == 3


def test_create_is_idempotent_and_refuses_other_options():
    mq.create("same", unlogged=True)
    assert mq.create("same", unlogged=True).unlogged
    with pytest.raises(mq.QueueExists, match="unlogged=True"):
        mq.create("same")


def test_send_and_read_join_the_callers_transaction():
    mq.create("tx")
    with pytest.raises(RuntimeError), transaction.atomic():
        mq.send("tx", {"rolled": "back"})
        raise RuntimeError
    assert mq.metrics("tx").queue_length == 0
    mid = mq.send("tx", {"kept": True})
    with pytest.raises(RuntimeError), transaction.atomic():
        assert mq.read("tx", vt=30)[0].msg_id == mid
        raise RuntimeError
    # The read was undone with its transaction: visible again, never counted.
    assert [(m.msg_id, m.read_ct) for m in mq.read("tx", vt=30)] == [(mid, 1)]


def test_unlogged_is_a_per_queue_choice():
    mq.create("fast", unlogged=True)
    mq.create("safe")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, relpersistence FROM pg_class WHERE relname LIKE 'pgqueue_mq_%%'"
            " AND relkind IN ('r', 'S')"
        )
        persistence = dict(cursor.fetchall())
    assert persistence["pgqueue_mq_q_fast"] == "u" and persistence["pgqueue_mq_s_fast"] == "u"
    assert persistence["pgqueue_mq_a_fast"] == "p"  # the archive stays logged, as in pgmq
    assert persistence["pgqueue_mq_q_safe"] == "p" and persistence["pgqueue_mq_a_safe"] == "p"
    assert persistence["pgqueue_mq_queue"] == "p"


def test_drop_removes_tables_and_refuses_a_dead_letter_queue_in_use():
    mq.create("dlq")
    mq.create("work", max_reads=3, dead_letter="dlq")
    with pytest.raises(mq.QueueInUse, match="dead-letter queue of work"):
        mq.drop("dlq")
    assert mq.drop("work") is True
    assert mq.drop("work") is False
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('pgqueue_mq_q_work'), to_regclass('pgqueue_mq_a_work')")
        assert cursor.fetchone() == (None, None)
    with pytest.raises(mq.QueueNotFound, match="'work' does not exist"):
        mq.send("work", {})


@pytest.mark.parametrize(
    "name",
    ["a" * 48, "", "1abc", 'x"; DROP TABLE pgqueue_job; --', "with space", "dot.ted", None],
)
def test_bad_queue_names_never_reach_sql(name, django_assert_num_queries):
    with django_assert_num_queries(0), pytest.raises(mq.InvalidQueueName):
        mq.create(name)


def test_a_47_character_name_with_dashes_is_a_valid_queue():
    name = "q-" + "a" * 45
    mq.create(name)
    assert mq.send(name, {"ok": 1}) == 1 and mq.read(name)[0].message == {"ok": 1}


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ("just text", "must be a JSON object or array, got str"),
        (42, "must be a JSON object or array, got int"),
        ({"a": "x\x00y"}, r"message\['a'\] holds a NUL"),
        ({"a": ["ok", "\ud800"]}, r"message\['a'\]\[1\] holds a lone surrogate"),
        ({"a\x00": 1}, "has a key holding a NUL"),
        ({"when": dt.date(2026, 1, 1)}, r"message\['when'\] is a datetime.date"),
        ({"n": float("nan")}, r"message\['n'\] is nan"),
        (_nested(120), "is nested too deeply"),
    ],
)
def test_bad_messages_name_the_problem_and_write_nothing(message, error):
    mq.create("strict")
    with pytest.raises(mq.InvalidMessage, match=error):
        mq.send("strict", message)
    with pytest.raises(mq.InvalidMessage, match=error.replace("message", r"messages\[1\]")):
        mq.send_batch("strict", [{"fine": 1}, message])
    assert mq.metrics("strict").total_messages == 0


def test_size_limit_is_the_argument_limit_in_utf8_bytes(settings):
    mq.create("sized")
    settings.PGQUEUE = {"MAX_ARGS_BYTES": 100}
    assert get_settings().MAX_ARGS_BYTES == 100
    mq.send("sized", {"t": "é" * 40})  # 80 bytes of text, 88 of JSON
    with pytest.raises(mq.InvalidMessage, match="more than the limit of 100"):
        mq.send("sized", {"t": "é" * 50})
    with pytest.raises(mq.InvalidMessage, match=r"the headers, more than the limit"):
        mq.send("sized", {}, headers={"t": "x" * 200})
    assert mq.metrics("sized").total_messages == 1


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: mq.read("bounds", vt=-1), "vt must be between 0"),
        (lambda: mq.read("bounds", vt=10**9), "vt must be between 0"),
        (lambda: mq.read("bounds", qty=0), "qty must be between 1 and 1000"),
        (lambda: mq.read("bounds", qty=True), "qty must be an integer"),
        (lambda: mq.send("bounds", {}, delay=-5), "delay must be between 0"),
        (lambda: mq.send("bounds", {}, delay=dt.datetime(2030, 1, 1)), "timezone-aware"),
        (lambda: mq.send("bounds", {}, headers=[1]), "headers must be a JSON object"),
        (lambda: mq.send_batch("bounds", []), "number of messages must be between 1"),
        (lambda: mq.read_with_poll("bounds", max_poll_seconds=10**6), "max_poll_seconds"),
    ],
)
def test_numeric_bounds(call, error):
    mq.create("bounds")
    with pytest.raises(ValueError, match=error):
        call()
    assert mq.metrics("bounds").total_messages == 0


def test_unknown_queue_is_a_clear_error():
    for call in (
        lambda: mq.send("nope", {}),
        lambda: mq.read("nope"),
        lambda: mq.metrics("nope"),
        lambda: mq.archive("nope", 1),
    ):
        with pytest.raises(mq.QueueNotFound, match="'nope' does not exist"):
            call()


@pytest.mark.django_db(transaction=True)
def test_read_with_poll_is_woken_by_the_send_commit_not_by_polling():
    mq.create("wake")
    sent_at: list[float] = []

    def send_later() -> None:
        time.sleep(0.5)
        with transaction.atomic():
            mq.send("wake", {"hello": 1})
            sent_at.append(time.monotonic())
        connection.close()

    sender = threading.Thread(target=send_later)
    started = time.monotonic()
    sender.start()
    # A poll interval far beyond the test: only the NOTIFY can end the wait early.
    got = mq.read_with_poll("wake", vt=30, max_poll_seconds=20, poll_interval=20)
    woke = time.monotonic()
    sender.join()
    assert [m.message for m in got] == [{"hello": 1}]
    assert woke - started < 10, "read_with_poll slept through the NOTIFY"


@pytest.mark.django_db(transaction=True)
def test_read_with_poll_returns_empty_after_max_poll_seconds():
    mq.create("quiet")
    started = time.monotonic()
    assert mq.read_with_poll("quiet", max_poll_seconds=0.3, poll_interval=0.1) == []
    assert time.monotonic() - started >= 0.3


def test_async_variants():
    async_to_sync(_async_round_trip)()


async def _async_round_trip() -> None:
    await mq.acreate("async_q")
    mid = await mq.asend("async_q", {"a": 1})
    assert await mq.asend_batch("async_q", [{"b": 2}]) == [mid + 1]
    got = await mq.aread("async_q", vt=30, qty=5)
    assert [m.msg_id for m in got] == [mid, mid + 1]
    assert await mq.aarchive("async_q", [mid]) == [mid]
    assert (await mq.ametrics("async_q")).queue_length == 1
    await mq.adrop("async_q")


def test_without_prepared_statements_the_api_uses_djangos_own_cursors(settings):
    settings.PGQUEUE = {"PREPARED_STATEMENTS": False}
    mq.create("plain")
    mid = mq.send("plain", {"a": 1})
    assert [m.msg_id for m in mq.read("plain")] == [mid]
    with pytest.raises(mq.QueueNotFound):
        mq.send("missing", {})


def test_set_vt_takes_seconds_or_an_instant_as_pgmq_does():
    mq.create("vt_at")
    mid = mq.send("vt_at", {"n": 1})
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
    moved = mq.set_vt("vt_at", mid, later)
    assert moved is not None and moved.vt == later
    assert mq.read("vt_at") == []
    assert mq.set_vt("vt_at", mid, 0).msg_id == mid
    with pytest.raises(ValueError, match="vt must be a timezone-aware datetime"):
        mq.set_vt("vt_at", mid, dt.datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="vt must be between 0 and"):
        mq.set_vt("vt_at", mid, -1)


def test_async_fenced_archive():
    mq.create("afence")
    mid = mq.send("afence", {})
    (held,) = mq.read("afence", vt=30)
    assert async_to_sync(mq.aarchive)("afence", mid, read_ct=held.read_ct + 1) == []
    assert async_to_sync(mq.adelete)("afence", mid, read_ct=held.read_ct) == [mid]


def test_timestamps_come_back_aware_in_utc_as_django_returns_them():
    """Our cursors parse timestamps with psycopg's own loader (store._TIMESTAMPTZ_LOADER):
    the values and their tzinfo are those of Django's loader."""
    mq.create("ts")
    msg_id = mq.send("ts", {"a": 1})
    (msg,) = mq.read("ts", vt=30)
    with connection.cursor() as cursor:
        cursor.execute('SELECT enqueued_at, vt, last_read_at FROM "pgqueue_mq_q_ts"')
        django_values = cursor.fetchone()
    assert msg.msg_id == msg_id
    assert (msg.enqueued_at, msg.vt, msg.last_read_at) == django_values
    assert all(value.tzinfo is dt.UTC for value in (msg.enqueued_at, msg.vt, msg.last_read_at))
    assert all(value.tzinfo is dt.UTC for value in django_values)
