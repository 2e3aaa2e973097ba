"""The pgmq-compatible SQL API: installed by a command, over the same queues as the Python
API (dead letters, NOTIFY wake-ups, name rules), and careful about whose schema it takes.

pgmq's own client suite runs against it in CI (scripts/pgmq_client_suite.sh)."""

from __future__ import annotations

import io
import threading
import time

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from django_pgqueue import mq

pytestmark = pytest.mark.django_db(transaction=True)


def command(*args: str) -> str:
    out = io.StringIO()
    call_command("pgqueue_install_sql_api", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def sql_api():
    assert "in schema pgmq_test (queues live in schema public)" in command("--schema", "pgmq_test")
    yield "pgmq_test"
    command("--schema", "pgmq_test", "--uninstall")


def one(query: str, *params):
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def test_sql_and_python_share_queues_and_dead_letters(sql_api):
    one("SELECT pgmq_test.create('from_sql')")
    mq.create("dead")
    mq.create("policy", max_reads=1, dead_letter="dead")
    assert [q.name for q in mq.list_queues()] == ["dead", "from_sql", "policy"]
    assert one("SELECT queue_name, is_unlogged FROM pgmq_test.list_queues()") == [
        ("dead", False),
        ("from_sql", False),
        ("policy", False),
    ]
    ((mid,),) = one("SELECT * FROM pgmq_test.send('from_sql', '{\"a\": 1}', 0)")
    assert mq.read("from_sql")[0].msg_id == mid

    one("SELECT pgmq_test.send('policy', '{\"job\": 7}'::jsonb)")
    assert one("SELECT read_ct FROM pgmq_test.read('policy', 0, 5)") == [(1,)]
    assert one("SELECT read_ct FROM pgmq_test.read('policy', 0, 5)") == []  # moved
    (letter,) = mq.read("dead")
    assert (
        letter.message == {"job": 7}
        and letter.headers["x-pgqueue-dead-letter"]["queue"] == "policy"
    )

    # pgmq's conditional read: only messages containing the given JSON.
    one("SELECT pgmq_test.send_batch('from_sql', ARRAY['{\"k\": 1}', '{\"k\": 2}']::jsonb[])")
    assert one("SELECT message->>'k' FROM pgmq_test.read('from_sql', 30, 5, '{\"k\": 2}')") == [
        ("2",)
    ]

    one("SELECT pgmq_test.create_unlogged('fast')")
    assert mq.get_queue("fast").unlogged
    assert one("SELECT pgmq_test.drop_queue('fast')") == [(True,)]
    assert one("SELECT pgmq_test.drop_queue('fast')") == [(False,)]


def test_an_sql_send_wakes_a_python_read_with_poll(sql_api):
    mq.create("wake_sql")

    def send_later() -> None:
        time.sleep(0.5)
        one("SELECT pgmq_test.send('wake_sql', '{\"from\": \"sql\"}')")
        connection.close()

    sender = threading.Thread(target=send_later)
    started = time.monotonic()
    sender.start()
    got = mq.read_with_poll("wake_sql", max_poll_seconds=20, poll_interval=20)
    sender.join()
    assert [m.message for m in got] == [{"from": "sql"}]
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("SELECT pgmq_test.send('x\"; DROP TABLE pgqueue_job; --', '{}')", "must be letters"),
        ("SELECT pgmq_test.create(repeat('a', 48))", "queue name is too long"),
        ("SELECT pgmq_test.create_partitioned('p')", "numeric intervals .* are not supported"),
        (
            "SELECT * FROM pgmq_test.read('missing', 30, 1)",
            "message queue 'missing' does not exist",
        ),
    ],
)
def test_sql_api_refuses_bad_input_clearly(sql_api, query, error):
    with pytest.raises(Exception, match=error):
        one(query)
    assert one("SELECT to_regclass('pgqueue_job')") == [("pgqueue_job",)]


def test_install_refuses_a_schema_that_is_not_its_own(sql_api):
    # Reinstalling over our own schema is fine (upgrades run the command again).
    command("--schema", "pgmq_test")
    one("CREATE SCHEMA someone_else")
    one("CREATE TABLE someone_else.meta (queue_name varchar)")
    try:
        with pytest.raises(CommandError, match="already holds other objects"):
            command("--schema", "someone_else")
        with pytest.raises(CommandError, match="not a django_pgqueue SQL API install"):
            command("--schema", "someone_else", "--uninstall")
        assert one("SELECT count(*) FROM someone_else.meta") == [(0,)]
    finally:
        one("DROP SCHEMA someone_else CASCADE")


def test_the_current_pgmq_surface(sql_api):
    """What pgmq 1.13 and its current clients call: last_read_at, pop(qty), set_vt with a
    timestamp, an array or an untyped parameter, and the metadata they read."""
    mq.create("cur")
    one("SELECT * FROM pgmq_test.send_batch('cur', ARRAY['{}', '{}', '{}']::jsonb[])")
    assert one("SELECT last_read_at FROM pgmq_test.set_vt('cur', 1, 0)") == [(None,)]
    ((mid, read_at, vt),) = one("SELECT msg_id, last_read_at, vt FROM pgmq_test.read('cur', 30, 1)")
    assert mid == 1 and read_at is not None and vt > read_at
    # The Python door records the read too, and returns it.
    assert mq.read("cur")[0].last_read_at is not None
    # The column order of pgmq <= 1.5 stays (clients that read by position), last_read_at last.
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM pgmq_test.pop('cur', 1)")
        assert [c.name for c in cursor.description] == [
            "msg_id",
            "read_ct",
            "enqueued_at",
            "vt",
            "message",
            "headers",
            "last_read_at",
        ]
    one("SELECT * FROM pgmq_test.send('cur', '{\"n\": 4}')")
    assert one("SELECT msg_id FROM pgmq_test.set_vt('cur', 1, now() + interval '1 hour')") == [(1,)]
    assert sorted(one("SELECT msg_id FROM pgmq_test.set_vt('cur', ARRAY[1, 2]::bigint[], 0)")) == [
        (1,),
        (2,),
    ]
    assert one(
        "SELECT msg_id FROM pgmq_test.set_vt('cur', ARRAY[2]::bigint[], clock_timestamp())"
    ) == [(2,)]
    # An untyped parameter (pgmq-js sends every value as text) resolves to one function.
    with connection.cursor() as cursor:
        cursor.execute("PREPARE untyped AS SELECT msg_id FROM pgmq_test.set_vt($1, $2, $3)")
        cursor.execute("EXECUTE untyped('cur', '2', '0')")
        assert cursor.fetchall() == [(2,)]
        cursor.execute("EXECUTE untyped('cur', '2', '2030-01-01T00:00:00Z')")
        assert cursor.fetchall() == [(2,)]
        with pytest.raises(Exception, match=r"vt must be seconds .* or a timestamp"):
            cursor.execute("EXECUTE untyped('cur', '2', 'soon')")
    assert sorted(r[0] for r in one("SELECT msg_id FROM pgmq_test.pop('cur', 5)")) == [1, 4]
    ((name, length, partition),) = one(
        "SELECT queue_name, queue_length, default_partition_length FROM pgmq_test.metrics('cur')"
    )
    assert (name, length, partition) == ("cur", 1, None)


def test_enable_notify_insert_notifies_pgmq_listeners_throttled(sql_api):
    from django_pgqueue.db import connect

    mq.create("ping")
    one("SELECT pgmq_test.enable_notify_insert('ping', 60000)")
    assert one(
        "SELECT queue_name, throttle_interval_ms FROM pgmq_test.list_notify_insert_throttles()"
    ) == [("ping", 60000)]
    with connect("notify-test", prepare=False) as listen:
        listen.execute('LISTEN "pgmq.q_ping.INSERT"')
        one("SELECT * FROM pgmq_test.send('ping', '{}')")
        mq.send("ping", {"from": "python"})  # the Python door's insert is the same table
        got = [n.channel for n in listen.notifies(timeout=2, stop_after=5)]
        assert got == ["pgmq.q_ping.INSERT"]  # the second within the interval: throttled
        one("SELECT pgmq_test.update_notify_insert('ping', 0)")
        mq.send("ping", {"n": 1})
        mq.send("ping", {"n": 2})
        assert len(list(listen.notifies(timeout=2, stop_after=2))) == 2
        one("SELECT pgmq_test.disable_notify_insert('ping')")
        mq.send("ping", {"n": 3})
        assert list(listen.notifies(timeout=0.5)) == []
    assert one("SELECT * FROM pgmq_test.list_notify_insert_throttles()") == []
    with pytest.raises(Exception, match="must be non-negative"):
        one("SELECT pgmq_test.enable_notify_insert('ping', -1)")
    with pytest.raises(Exception, match="message queue 'nope' does not exist"):
        one("SELECT pgmq_test.enable_notify_insert('nope')")


def test_a_reinstall_keeps_insert_notification(sql_api):
    mq.create("kept")
    one("SELECT pgmq_test.enable_notify_insert('kept', 10)")
    command("--schema", "pgmq_test")
    assert one(
        "SELECT queue_name, throttle_interval_ms FROM pgmq_test.list_notify_insert_throttles()"
    ) == [("kept", 10)]
