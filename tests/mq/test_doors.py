"""The SQL door keeps the Python door's message rules, and neither door resolves a
built-in through the caller's search_path."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection

from django_pgqueue import mq
from django_pgqueue.db import connect
from django_pgqueue.mq import store

from ..support.planted import planted_functions
from .test_sql_api import one

pytestmark = pytest.mark.django_db(transaction=True)


#: (what, SQL expression of the message, Python value or None when Python cannot
#: even build it, the words the refusal must contain).
REFUSED = [
    ("string", "'\"text\"'::jsonb", "text", "JSON object or array"),
    ("number", "'5'::jsonb", 5, "JSON object or array"),
    ("json null", "'null'::jsonb", None, "JSON object or array"),
    ("sql null", "NULL::jsonb", None, "NULL"),
    ("deep", "(repeat('[', 300) || repeat(']', 300))::jsonb", "deep", "nested"),
    ("huge int", "('[' || repeat('7', 5000) || ']')::jsonb", None, "Python cannot read"),
    ("float overflow", "('[' || repeat('9', 400) || '.5]')::jsonb", None, "Python cannot read"),
    ("float overflow .0", "('[' || repeat('9', 400) || '.0]')::jsonb", None, "Python cannot"),
    ("oversize", "pg_catalog.jsonb_build_array(repeat('x', 1100000))", ["x" * 1_100_000], "bytes"),
]


def _python_value(value):
    if value == "deep":
        deep: list = []
        for _ in range(299):
            deep = [deep]
        return deep
    return value


@pytest.mark.parametrize(("what", "body", "value", "words"), REFUSED, ids=[r[0] for r in REFUSED])
def test_sql_send_refuses_what_python_send_refuses(sql_api, what, body, value, words):
    mq.create("door")
    if value is not None or what == "json null":
        with pytest.raises(mq.InvalidMessage):
            mq.send("door", _python_value(value))
    for query in (
        f"SELECT * FROM pgmq_test.send('door', {body})",
        f"SELECT * FROM pgmq_test.send_batch('door', ARRAY['{{}}'::jsonb, {body}])",
    ):
        with pytest.raises(DatabaseError) as refused:
            one(query)
        assert words in str(refused.value), str(refused.value)
    assert mq.metrics("door").total_messages == 0  # nothing written, not even half a batch


def test_sql_send_refuses_headers_python_refuses(sql_api):
    mq.create("door")
    with pytest.raises(mq.InvalidMessage):
        mq.send("door", {}, headers=["not", "an", "object"])  # type: ignore[arg-type]
    with pytest.raises(DatabaseError, match="headers must be a JSON object, got array"):
        one("SELECT * FROM pgmq_test.send('door', '{}', '[1]'::jsonb)")
    with pytest.raises(DatabaseError, match="1 headers for 2 messages"):
        one(
            "SELECT * FROM pgmq_test.send_batch('door', ARRAY['{}', '[]']::jsonb[],"
            " ARRAY['{}']::jsonb[])"
        )
    assert mq.metrics("door").total_messages == 0
    one("SELECT * FROM pgmq_test.send('door', '[1, {\"a\": null}]', '{\"h\": 1}'::jsonb)")
    (message,) = mq.read("door")
    assert message.message == [1, {"a": None}] and message.headers == {"h": 1}


def test_sql_send_accepts_what_python_send_accepts_at_the_limits(sql_api):
    mq.create("door")
    one(
        "SELECT * FROM pgmq_test.send_batch('door', ARRAY["
        " ('[' || repeat('9', 4300) || ', 1.5, 1e300]')::jsonb,"
        " (repeat('[', 100) || repeat(']', 100))::jsonb])"
    )
    big, deep = mq.read("door", qty=5)
    assert big.message == [int("9" * 4300), 1.5, 10**300]
    mq.send("door", deep.message)  # exactly MAX_JSON_DEPTH levels: both doors take it
    assert mq.metrics("door").total_messages == 3


PLANTED = [
    ("public.make_interval(secs integer)", "interval"),
    ("public.make_interval(secs numeric)", "interval"),
    ("public.make_interval(secs double precision)", "interval"),
    ("public.clock_timestamp(x integer DEFAULT 0)", "timestamptz"),
]


@pytest.fixture
def planted():
    """Functions in public that would win over the built-ins for an unqualified call."""
    with planted_functions(PLANTED):
        yield


@pytest.mark.parametrize("prepared", [True, False], ids=["server-binding", "client-binding"])
def test_python_statements_never_run_a_planted_function(planted, settings, prepared):
    settings.PGQUEUE = {**settings.PGQUEUE, "PREPARED_STATEMENTS": prepared}
    mq.create("pinned", max_reads=5)
    mq.create("pinned_dlq")
    mq.create("pinned_dl", max_reads=1, dead_letter="pinned_dlq")
    mid = mq.send("pinned", {"n": 1}, delay=0)
    mq.send_batch("pinned", [{"n": 2}], delay=0)
    assert [m.msg_id for m in mq.read("pinned", vt=0, qty=5)] == [mid, mid + 1]
    assert mq.set_vt("pinned", mid, 0) is not None
    mq.send("pinned_dl", {"n": 3})
    mq.read("pinned_dl", vt=0)
    mq.read("pinned_dl", vt=0)  # -> dead letter
    assert mq.metrics("pinned_dlq").queue_length == 1
    info = store.get_queue("pinned")
    with connect("mq-test-worker") as conn:
        held = store.claim(conn, info, 5, 5)
        pairs = [(m.msg_id, m.read_ct) for m in held]
        assert store.extend(conn, "pinned", pairs, 5)
        store.settle(conn, "pinned", [(i, c, "retry", 1.0) for i, c in pairs])
    assert mq.pop("pinned", qty=5) == []  # hidden by the retry delay
    mq.archive("pinned", [mid])
    assert mq.metrics("pinned").queue_length == 1


def test_sql_functions_never_run_a_planted_function(sql_api, planted):
    one("SELECT pgmq_test.create('pinned_sql')")
    (mid,) = one("SELECT * FROM pgmq_test.send('pinned_sql', '{\"a\": 1}', 0)")[0]
    one("SELECT * FROM pgmq_test.send('pinned_sql', '{\"a\": 2}', '{\"h\": 1}', 0)")
    one("SELECT * FROM pgmq_test.send_batch('pinned_sql', ARRAY['{\"b\": 1}']::jsonb[], 0)")
    assert len(one("SELECT * FROM pgmq_test.read('pinned_sql', 0, 10)")) == 3
    assert one("SELECT msg_id FROM pgmq_test.set_vt('pinned_sql', %s, 0)", mid) == [(mid,)]
    assert len(one("SELECT * FROM pgmq_test.read_with_poll('pinned_sql', 30, 10, 1, 10)")) == 3
    assert one("SELECT queue_length FROM pgmq_test.metrics('pinned_sql')") == [(3,)]


def test_every_sql_api_function_pins_its_search_path(sql_api):
    unpinned = one(
        "SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'pgmq_test'::regnamespace"
        " AND NOT coalesce(p.proconfig, '{}') @> ARRAY['search_path=pg_catalog, pg_temp']"
    )
    assert unpinned == []
    assert (
        one("SELECT count(*) FROM pg_proc WHERE pronamespace = 'pgmq_test'::regnamespace")[0][0]
        > 30
    )


def test_strict_ids_at_the_python_door():
    mq.create("strict")
    for bad in (10**30, -1, 0, True, 1.5, "²", "1_0", " 1"):
        with pytest.raises(ValueError, match=r"msg_ids\[0\]"):
            mq.archive("strict", [bad])
    with pytest.raises(ValueError, match="msg_id"):
        mq.set_vt("strict", 2**63, 0)
    assert mq.delete("strict", ["12"]) == []  # ASCII digits are an id
    assert connection.is_usable()
