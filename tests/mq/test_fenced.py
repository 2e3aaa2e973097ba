"""Fenced deletes: a consumer whose visibility timeout lapsed cannot delete or archive
the message another consumer has read since (SQS refuses an expired receipt handle;
pgmq deletes by msg_id alone). Both doors, two consumers, a real lapsed timeout."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from django_pgqueue import mq

pytestmark = pytest.mark.django_db(transaction=True)


def lapse(name: str, vt: float) -> mq.Message:
    """A message read with a ``vt`` that is left to lapse."""
    (held,) = mq.read(name, vt=vt, qty=1)
    time.sleep(vt + 0.2)
    return held


@pytest.mark.parametrize("outcome", ["archive", "delete"])
def test_a_late_consumer_cannot_settle_the_message_another_has_read(outcome):
    mq.create("fence")
    mid = mq.send("fence", {"job": 1})
    first = lapse("fence", 0.3)  # consumer A stalls past its timeout
    (second,) = mq.read("fence", vt=30)  # consumer B reads it again
    assert (first.msg_id, first.read_ct, second.read_ct) == (mid, 1, 2)

    settle = getattr(mq, outcome)
    assert settle("fence", first.msg_id, read_ct=first.read_ct) == []  # A's read is stale
    assert mq.metrics("fence").queue_length == 1  # B still holds it: nothing lost
    assert settle("fence", second.msg_id, read_ct=second.read_ct) == [mid]
    assert mq.metrics("fence").queue_length == 0
    archived = one("SELECT count(*) FROM pgqueue_mq_a_fence")[0][0]
    assert archived == (1 if outcome == "archive" else 0)


def test_fenced_batches_match_each_id_with_its_own_read():
    mq.create("fence_b")
    ids = mq.send_batch("fence_b", [{"n": i} for i in range(3)])
    held = mq.read("fence_b", vt=30, qty=3)
    cts = [m.read_ct for m in held]
    assert mq.archive("fence_b", ids, read_ct=[cts[0], cts[1] + 1, cts[2]]) == [ids[0], ids[2]]
    assert [m.msg_id for m in mq.pop("fence_b")] == []  # ids[1] is still hidden, not lost
    assert mq.delete("fence_b", [ids[1]], read_ct=[cts[1]]) == [ids[1]]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: mq.delete("fence_v", [1, 2], read_ct=[1]), "1 read counts for 2 message ids"),
        (lambda: mq.delete("fence_v", 1, read_ct=True), "read_ct"),
        (lambda: mq.archive("fence_v", 1, read_ct=-1), "read_ct"),
        (lambda: mq.archive("fence_v", 1, read_ct="one"), "read_ct"),
        (lambda: mq.archive("fence_v", 1, read_ct=2**31), "read_ct"),
    ],
)
def test_fenced_calls_refuse_bad_read_counts_before_sql(call, error):
    mq.create("fence_v")
    with pytest.raises(ValueError, match=error):
        call()


def one(query: str, *params):
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall()


def test_the_sql_door_fences_the_same_way():
    from django.core.management import call_command

    call_command("pgqueue_install_sql_api", "--schema", "pgmq_fence")
    try:
        mq.create("fence_sql")
        mid = mq.send("fence_sql", {"job": 2})
        first = lapse("fence_sql", 0.3)
        ((second_ct,),) = one("SELECT read_ct FROM pgmq_fence.read('fence_sql', 30, 1)")
        assert one("SELECT pgmq_fence.delete('fence_sql', %s, %s)", mid, first.read_ct) == [
            (False,)
        ]
        assert one("SELECT pgmq_fence.archive('fence_sql', %s, %s)", mid, first.read_ct) == [
            (False,)
        ]
        assert one("SELECT pgmq_fence.archive('fence_sql', %s, %s)", mid, second_ct) == [(True,)]
        assert one("SELECT msg_id FROM pgqueue_mq_a_fence_sql") == [(mid,)]
        with pytest.raises(Exception, match="1 read counts for 2 message ids"):
            one("SELECT pgmq_fence.delete('fence_sql', ARRAY[1, 2]::bigint[], ARRAY[1])")
    finally:
        call_command("pgqueue_install_sql_api", "--schema", "pgmq_fence", "--uninstall")
