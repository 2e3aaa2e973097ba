"""Topic routing at both doors: pgmq's wildcard rules, fan-out in one transaction,
validation with errors naming the problem, and bindings that go with their queue."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from django_pgqueue import mq

from .test_sql_api import one

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def logs():
    for name in ("all_logs", "error_logs", "api_errors"):
        mq.create(name)
    mq.bind_topic("logs.#", "all_logs")
    mq.bind_topic("logs.*.error", "error_logs")
    mq.bind_topic("logs.api.error", "api_errors")


# pgmq's documented examples (docs/topics.md) and the edges of its compilation:
# "#" is any run of characters, so "logs.#" needs the dot and "#.error" a segment.
ROUTES = [
    ("logs.api.error", ["all_logs", "api_errors", "error_logs"]),
    ("logs.db.error", ["all_logs", "error_logs"]),
    ("logs.api.info", ["all_logs"]),
    ("logs.error", ["all_logs"]),
    ("logs", []),
    ("logsx.api.error", []),
    ("audit.api.error", []),
]


@pytest.mark.parametrize(("key", "queues"), ROUTES)
def test_python_routes_as_pgmq(logs, key, queues):
    matches = mq.test_routing(key)
    assert sorted(m.queue_name for m in matches) == queues
    assert [m.pattern for m in matches] == sorted(m.pattern for m in matches)
    assert mq.send_topic(key, {"key": key}) == len(queues)
    for name in ("all_logs", "error_logs", "api_errors"):
        got = [m.message for m in mq.read(name, qty=10)]
        assert got == ([{"key": key}] if name in queues else [])


@pytest.mark.parametrize(("key", "queues"), ROUTES)
def test_sql_routes_like_python(logs, sql_api, key, queues):
    assert one("SELECT pgmq_test.send_topic(%s, '{\"k\": 1}'::jsonb)", key) == [(len(queues),)]
    assert sorted(q for (q,) in one("SELECT queue_name FROM pgmq_test.test_routing(%s)", key)) == (
        sorted(queues)
    )
    for name in queues:
        assert [m.message for m in mq.read(name)] == [{"k": 1}]


def test_star_is_one_segment_hash_any_run():
    mq.create("star")
    mq.create("hash")
    mq.bind_topic("a.*", "star")
    mq.bind_topic("a.#", "hash")
    mq.bind_topic("#.z", "hash")
    regexes = {m.pattern: m.compiled_regex for m in mq.test_routing("a.b")}
    assert regexes == {"a.*": "^a\\.[^.]+$", "a.#": "^a\\..*$"}
    assert [m.queue_name for m in mq.test_routing("a.b")] == ["hash", "star"]
    assert [m.queue_name for m in mq.test_routing("a.b.c")] == ["hash"]
    assert [m.queue_name for m in mq.test_routing("x.y.z")] == ["hash"]
    assert mq.test_routing("z") == []
    # A queue bound by two matching patterns gets the message once.
    assert mq.send_topic("a.z", {"n": 1}) == 2
    assert len(mq.read("hash", qty=10)) == 1


def test_binding_is_idempotent_listed_and_unbound():
    mq.create("q1")
    mq.bind_topic("orders.#", "q1")
    mq.bind_topic("orders.#", "q1")
    mq.bind_topic("users.*", "q1")
    listed = mq.list_topic_bindings("q1")
    assert sorted(b.pattern for b in listed) == ["orders.#", "users.*"]
    assert all(b.queue_name == "q1" and b.bound_at for b in listed)
    assert mq.unbind_topic("orders.#", "q1") is True
    assert mq.unbind_topic("orders.#", "q1") is False
    assert [b.pattern for b in mq.list_topic_bindings()] == ["users.*"]


def test_send_batch_topic_fans_out_each_message():
    mq.create("b1")
    mq.create("b2")
    mq.bind_topic("n.#", "b1")
    mq.bind_topic("n.email", "b2")
    sent = mq.send_batch_topic("n.email", [{"i": 1}, {"i": 2}], headers=[{"h": 1}, None])
    assert [q for q, _ in sent] == ["b1", "b1", "b2", "b2"]
    assert [(m.message, m.headers) for m in mq.read("b2", qty=5)] == [
        ({"i": 1}, {"h": 1}),
        ({"i": 2}, None),
    ]


def test_fan_out_is_all_or_nothing():
    mq.create("ok")
    mq.create("gone")
    mq.bind_topic("t.x", "ok")
    mq.bind_topic("t.x", "gone")
    # A table missing under a queue still registered: the second send fails, and the
    # first one is rolled back with it.
    with connection.cursor() as cursor:
        cursor.execute('DROP TABLE "pgqueue_mq_q_ok"')
    with pytest.raises(mq.QueueNotFound):
        mq.send_topic("t.x", {"a": 1})
    assert mq.metrics("gone").queue_length == 0


def test_dropping_a_queue_drops_its_bindings(sql_api):
    mq.create("d1")
    mq.bind_topic("x.#", "d1")
    one("SELECT pgmq_test.create('d2')")
    one("SELECT pgmq_test.bind_topic('x.#', 'd2')")
    mq.drop("d1")
    one("SELECT pgmq_test.drop_queue('d2')")
    assert mq.list_topic_bindings() == []
    assert mq.send_topic("x.y", {"a": 1}) == 0


BAD_KEYS = [
    ("", "routing_key cannot be empty"),
    (".a", "routing_key cannot start with a dot"),
    ("a.", "routing_key cannot end with a dot"),
    ("a..b", "routing_key cannot contain consecutive dots"),
    ("a.*", "routing_key may hold only letters"),
    ("a b", "routing_key may hold only letters"),
    ("k" * 256, "routing_key is too long"),
]
BAD_PATTERNS = [
    ("", "pattern cannot be empty"),
    ("logs.**", "pattern cannot contain adjacent wildcards"),
    ("logs.#*", "pattern cannot contain adjacent wildcards"),
    ("logs..x", "pattern cannot contain consecutive dots"),
    ("logs.x!", "pattern may hold only letters"),
    (".logs", "pattern cannot start with a dot"),
]


@pytest.mark.parametrize(("key", "error"), BAD_KEYS)
def test_bad_routing_keys_refused_at_both_doors(sql_api, key, error):
    mq.create("k")
    with pytest.raises(ValueError, match=error):
        mq.send_topic(key, {"a": 1})
    with pytest.raises(Exception, match=error), transaction.atomic():
        one("SELECT pgmq_test.send_topic(%s, '{}'::jsonb)", key)
    with pytest.raises(Exception, match=error), transaction.atomic():
        one("SELECT pgmq_test.validate_routing_key(%s)", key)


@pytest.mark.parametrize(("pattern", "error"), BAD_PATTERNS)
def test_bad_patterns_refused_at_both_doors(sql_api, pattern, error):
    mq.create("p")
    with pytest.raises(ValueError, match=error):
        mq.bind_topic(pattern, "p")
    with pytest.raises(Exception, match=error), transaction.atomic():
        one("SELECT pgmq_test.bind_topic(%s, 'p')", pattern)
    assert mq.list_topic_bindings() == []


def test_bind_to_missing_queue_and_bad_message_refused(sql_api):
    with pytest.raises(mq.QueueNotFound):
        mq.bind_topic("a.#", "nope")
    with pytest.raises(Exception, match="does not exist"), transaction.atomic():
        one("SELECT pgmq_test.bind_topic('a.#', 'nope')")
    # Refused even when no queue matches: nothing reaches the stores half-checked.
    with pytest.raises(mq.InvalidMessage):
        mq.send_topic("a.b", "not an object")  # type: ignore[arg-type]
    with pytest.raises(Exception, match="must be a JSON object or array"), transaction.atomic():
        one("SELECT pgmq_test.send_topic('a.b', '3'::jsonb)")


def test_sql_api_surface(sql_api):
    one("SELECT pgmq_test.create('s1')")
    one("SELECT pgmq_test.bind_topic('e.*', 's1')")
    assert one("SELECT pattern, queue_name FROM pgmq_test.list_topic_bindings()") == [("e.*", "s1")]
    assert one("SELECT pattern FROM pgmq_test.list_topic_bindings('s1')") == [("e.*",)]
    assert one("SELECT pgmq_test.send_topic('e.a', '{\"a\": 1}'::jsonb, 0)") == [(1,)]
    assert one(
        "SELECT pgmq_test.send_topic('e.b', '{\"a\": 2}'::jsonb, '{\"h\": 1}'::jsonb, 0)"
    ) == [(1,)]
    # The three-argument form with headers, which the pgmq client calls.
    assert one("SELECT pgmq_test.send_topic('e.b', '{\"a\": 3}'::jsonb, '{}'::jsonb)") == [(1,)]
    rows = one(
        "SELECT * FROM pgmq_test.send_batch_topic("
        "'e.c', ARRAY['{\"b\": 1}', '{\"b\": 2}']::jsonb[])"
    )
    assert [q for q, _ in rows] == ["s1", "s1"]
    assert [m.message for m in mq.read("s1", qty=10)] == [
        {"a": 1},
        {"a": 2},
        {"a": 3},
        {"b": 1},
        {"b": 2},
    ]
    assert one("SELECT pgmq_test.unbind_topic('e.*', 's1')") == [(True,)]
    assert one("SELECT pgmq_test.unbind_topic('e.*', 's1')") == [(False,)]
