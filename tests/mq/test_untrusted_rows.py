"""What comes back from a queue table is untrusted: a row Python cannot decode is
quarantined (the dead-letter queue or the archive) with an error naming it, and
never stops a read, a consumer's claim or the admin browser; the messages read
beside it are handled normally."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from django.db import connection
from django.urls import reverse
from psycopg import sql as pgsql

from django_pgqueue import mq
from django_pgqueue.mq.consumers import unregister

from ..admin.conftest import _staff, csrf_client, csrf_token
from .conftest import table_rows

pytestmark = pytest.mark.django_db(transaction=True)

QUARANTINE_HEADER = "x-pgqueue-quarantine"

#: Bodies PostgreSQL stores and Python cannot decode (SQL expressions), each as
#: another program (an old pgmq client, a hand-written INSERT) may have written it.
POISON = {
    "deep": "(repeat('[', 2000) || repeat(']', 2000))::jsonb",
    "huge_int": "('[' || repeat('7', 5000) || ']')::jsonb",
    "float_overflow": "('[' || repeat('9', 400) || '.5]')::jsonb",
}


def plant(queue: str, body_sql: str, headers_sql: str = "NULL") -> int:
    """Insert a row straight into a queue's table, past every door."""
    query = pgsql.SQL(
        "INSERT INTO {} (vt, message, headers) VALUES (clock_timestamp(), {}, {}) RETURNING msg_id"
    ).format(pgsql.Identifier(f"pgqueue_mq_q_{queue}"), pgsql.SQL(body_sql), pgsql.SQL(headers_sql))
    with connection.cursor() as cursor:
        cursor.execute(query.as_string(None))
        return int(cursor.fetchone()[0])


def archived(queue: str) -> list[tuple]:
    return mq.store.browse(queue, archived=True, limit=1000)


@pytest.mark.parametrize("kind", sorted(POISON))
def test_read_quarantines_a_poison_row_into_the_archive_and_returns_the_rest(kind):
    mq.create("plain")
    before = mq.send("plain", {"n": 1})
    poison = plant("plain", POISON[kind])
    after = mq.send_batch("plain", [{"n": 2}, {"n": 3}])
    messages = mq.read("plain", vt=30, qty=10)
    assert [(m.msg_id, m.read_ct) for m in messages] == [(before, 1), (after[0], 1), (after[1], 1)]
    assert mq.metrics("plain").queue_length == 3  # the poison left the queue
    (row,) = archived("plain")
    assert row[0] == poison
    note = json.loads(row[5])[QUARANTINE_HEADER]
    assert note["queue"] == "plain" and note["msg_id"] == poison
    assert note["error"].startswith("message cannot be decoded")
    assert mq.read("plain", vt=30, qty=10) == []  # the others stay hidden, no second read


def test_with_a_dead_letter_queue_the_poison_goes_there_and_innocents_keep_their_reads():
    mq.create("poison_dlq")
    mq.create("guarded", max_reads=2, dead_letter="poison_dlq")
    innocent = mq.send("guarded", {"n": 1})
    poison = plant("guarded", POISON["huge_int"], '\'{"trace": "abc"}\'::jsonb')
    (message,) = mq.read("guarded", vt=0, qty=10)
    assert (message.msg_id, message.read_ct) == (innocent, 1)
    # The innocent one is read again normally: the poison cost it nothing.
    (again,) = mq.read("guarded", vt=0, qty=10)
    assert (again.msg_id, again.read_ct) == (innocent, 2)
    (letter,) = mq.store.browse("poison_dlq")
    headers = json.loads(letter[5])
    assert headers["trace"] == "abc"
    assert headers[QUARANTINE_HEADER]["msg_id"] == poison
    assert headers["x-pgqueue-dead-letter"]["queue"] == "guarded"
    # Reading the dead-letter queue quarantines it again (into its archive): no raise.
    assert mq.read("poison_dlq", vt=30, qty=10) == []
    assert len(archived("poison_dlq")) == 1


def test_pop_and_set_vt_quarantine_instead_of_raising():
    mq.create("popped")
    poison = plant("popped", POISON["deep"])
    innocent = mq.send("popped", {"n": 1})
    assert [m.msg_id for m in mq.pop("popped", qty=10)] == [innocent]
    assert [row[0] for row in archived("popped")] == [poison]

    other = plant("popped", POISON["huge_int"])
    assert mq.set_vt("popped", other, 0) is None
    assert mq.metrics("popped").queue_length == 0
    assert sorted(row[0] for row in archived("popped")) == sorted([poison, other])


handled: list[int] = []


@pytest.fixture
def consumer() -> Iterator[None]:
    handled.clear()

    @mq.consumer("consumed", vt=5, batch=10)
    def handle(message: mq.Message) -> None:
        handled.append(message.message["n"])

    yield
    unregister("consumed")


def test_a_consumer_handles_the_innocent_messages_beside_a_poison_one(consumer, run_worker):
    mq.create("consumed", max_reads=3)
    ids = mq.send_batch("consumed", [{"n": n} for n in range(3)])
    poisons = [plant("consumed", body) for body in POISON.values()]
    ids += mq.send_batch("consumed", [{"n": n} for n in range(3, 6)])
    worker = run_worker(burst=True, lease_seconds=5)
    assert sorted(handled) == list(range(6))
    assert worker.outcomes == {"succeeded": 6}
    assert mq.metrics("consumed").queue_length == 0
    rows = archived("consumed")
    assert {row[0] for row in rows} == set(ids) | set(poisons)
    assert table_rows("pgqueue_mq_a_consumed") == len(ids) + len(poisons)


def test_the_admin_browser_shows_a_poison_row_and_lets_the_operator_delete_it(client):
    mq.create("browsed")
    poison = plant("browsed", POISON["deep"])
    mq.send("browsed", {"n": 1})
    operator = csrf_client(_staff("mq_op", "view_messagequeue", "operate_messagequeue"))
    url = reverse("admin:django_pgqueue_messagequeue_messages", args=["browsed"])
    page = operator.get(url)
    assert page.status_code == 200
    text = page.content.decode()
    assert "cannot be decoded" in text and "[[[[" in text
    assert len(text) < 200_000  # the raw text is shown truncated
    token = csrf_token(operator, url)
    response = operator.post(
        url,
        {"operation": "delete", "msg_id": [poison], "csrfmiddlewaretoken": token, "confirm": "yes"},
    )
    assert response.status_code == 302
    assert [m.message for m in mq.read("browsed", qty=10)] == [{"n": 1}]


def test_popped_poison_goes_to_the_dead_letter_queue_and_odd_headers_are_kept():
    mq.create("pop_dlq")
    mq.create("pop_src", max_reads=3, dead_letter="pop_dlq")
    poison = plant("pop_src", POISON["deep"], '\'["not", "an", "object"]\'::jsonb')
    assert mq.pop("pop_src", qty=5) == []
    (letter,) = mq.store.browse("pop_dlq")
    headers = json.loads(letter[5])
    assert headers["x-pgqueue-headers"] == ["not", "an", "object"]
    assert headers[QUARANTINE_HEADER]["msg_id"] == poison
    assert headers["x-pgqueue-dead-letter"]["queue"] == "pop_src"
    assert letter[4].startswith("[[[[")  # the document itself, as PostgreSQL held it
