"""Dead letters by read count, under concurrent readers: every message is returned
exactly ``max_reads`` times and then moved, once, by a read statement; none is lost."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from django.db import connection

from django_pgqueue import mq

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGES = 150
MAX_READS = 3
READERS = 4


def _read_until_empty(queue: str, seen: list[tuple[int, int]], errors: list[BaseException]) -> None:
    try:
        idle = 0
        while idle < 3:
            # vt=0: a message is visible again at once, as if every consumer crashed.
            got = mq.read(queue, vt=0, qty=7)
            seen.extend((m.msg_id, m.read_ct) for m in got)
            idle = 0 if got else idle + 1
    except BaseException as exc:  # reported by the test
        errors.append(exc)
    finally:
        connection.close()


def _run_readers(queue: str) -> list[tuple[int, int]]:
    seen: list[tuple[int, int]] = []
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=_read_until_empty, args=(queue, seen, errors))
        for _ in range(READERS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    return seen


def _assert_each_read_exactly_max_times(seen: list[tuple[int, int]], ids: list[int]) -> None:
    per_message = Counter(msg_id for msg_id, _ in seen)
    assert set(per_message) == set(ids)
    assert set(per_message.values()) == {MAX_READS}, "a message was read too often or too little"
    # Never handed to two readers for the same read: each count was returned once.
    assert len(set(seen)) == len(seen)


def test_dead_letters_move_to_the_dead_letter_queue_once_each():
    mq.create("dead")
    mq.create("work", max_reads=MAX_READS, dead_letter="dead")
    ids = mq.send_batch("work", [{"n": n} for n in range(MESSAGES)], headers=None)
    seen = _run_readers("work")
    _assert_each_read_exactly_max_times(seen, ids)

    assert mq.metrics("work").queue_length == 0
    dead = mq.read("dead", vt=30, qty=1000)
    origins = [m.headers["x-pgqueue-dead-letter"] for m in dead]
    assert sorted(o["msg_id"] for o in origins) == ids, "lost or duplicated dead letters"
    assert {o["queue"] for o in origins} == {"work"}
    assert {o["read_ct"] for o in origins} == {MAX_READS}
    assert sorted(m.message["n"] for m in dead) == list(range(MESSAGES))


def test_without_a_dead_letter_queue_dead_letters_go_to_the_archive():
    mq.create("solo", max_reads=MAX_READS)
    ids = mq.send_batch("solo", [{"n": n} for n in range(MESSAGES)])
    seen = _run_readers("solo")
    _assert_each_read_exactly_max_times(seen, ids)
    rows = mq.store.browse("solo", archived=True, limit=1000)
    assert sorted(row[0] for row in rows) == ids
    assert {row[1] for row in rows} == {MAX_READS}


def test_a_dead_letter_moved_back_is_a_fresh_message_of_its_queue():
    mq.create("dead")
    mq.create("work", max_reads=1, dead_letter="dead")
    mq.send("work", {"job": 1}, headers={"trace": "t"})
    assert mq.read("work", vt=0)[0].read_ct == 1
    assert mq.read("work", vt=0) == []  # the second read moves it
    (letter,) = mq.read("dead", vt=30)
    (moved,) = mq.move("dead", [letter.msg_id], to="work")
    (again,) = mq.read("work", vt=30)
    assert (again.msg_id, again.read_ct, again.message) == (moved, 1, {"job": 1})
    assert again.headers == {"trace": "t"}  # the dead-letter record is dropped
    assert mq.metrics("dead").queue_length == 0
