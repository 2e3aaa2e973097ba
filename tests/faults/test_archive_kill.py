"""kill -9 of a ``pgqueue_prune`` while it drops a partitioned message archive's day
partitions: every archived message within the retention survives, no waiting message
is touched, and the next prune drops the rest (a partition left detached or
detach-pending included).

The kill is a SIGKILL of the real process, followed at once by
``pg_terminate_backend`` of its session, as in ``test_history_kill.py``.
"""

from __future__ import annotations

import datetime as dt

import pytest

from django_pgqueue import history, mq
from django_pgqueue.db import connect
from django_pgqueue.maintenance import prune
from django_pgqueue.mq import partitions

from .helpers import kill_prune_when, query

pytestmark = [
    pytest.mark.fault,
    pytest.mark.timeout(300),
    pytest.mark.django_db(transaction=True),
]

QUEUE = "kill_archive"
DAYS = 20
PER_DAY = 2000
ARCHIVE = partitions.family(QUEUE)


def fill(dsn: str, day: dt.date, first: int) -> None:
    with connect("test-fill") as conn:
        history.create_partition(conn, partitions.KEY, day, ARCHIVE)
    query(
        dsn,
        f'INSERT INTO "{ARCHIVE.table}" (msg_id, archived_at, vt, message)'
        " SELECT i, %s, now(), '{}'::jsonb FROM generate_series(%s::bigint, %s::bigint) AS i",
        (dt.datetime.combine(day, dt.time(12), tzinfo=dt.UTC), first, first + PER_DAY - 1),
    )


def attached(conn) -> int:
    return sum(1 for p in history.partitions(conn, ARCHIVE) if p.attached_to)


def test_kill9_of_a_prune_while_it_drops_archive_partitions(test_dsn, summary):
    mq.create(QUEUE, archive_retention=dt.timedelta(days=7))
    try:
        waiting = set(mq.send_batch(QUEUE, [{"waiting": n} for n in range(100)]))
        (today,) = query(test_dsn, "SELECT (now() AT TIME ZONE 'UTC')::date")[0]
        for n in range(1, DAYS + 1):
            fill(test_dsn, today - dt.timedelta(days=n), n * PER_DAY)
        # Retention keeps a day partition until its whole day is 7 days old.
        kept_ids = {
            r[0]
            for r in query(
                test_dsn,
                f"SELECT msg_id FROM \"{ARCHIVE.table}\" WHERE (date_trunc('day', archived_at,"
                " 'UTC') + interval '1 day') > now() - interval '7 days'",
            )
        }
        assert kept_ids
        with connect("test-count") as conn:
            before = attached(conn)

        def dropped_one() -> bool:
            with connect("test-count") as conn:
                return attached(conn) < before

        kill_prune_when(test_dsn, dropped_one, "an archive partition dropped")
        with connect("test-count") as conn:
            mid = attached(conn)
        left = {r[0] for r in query(test_dsn, f'SELECT msg_id FROM "{ARCHIVE.table}"')}
        live = {r[0] for r in query(test_dsn, f'SELECT msg_id FROM "pgqueue_mq_q_{QUEUE}"')}
        summary(
            faults=1,
            tasks=len(kept_ids) + len(waiting),
            duplicates=0,
            lost=len(kept_ids - left) + len(waiting - live),
            note=f"prune killed with {before - mid} of {before} archive partitions gone",
        )
        assert kept_ids <= left and live == waiting  # nothing kept or waiting lost

        prune()
        left = {r[0] for r in query(test_dsn, f'SELECT msg_id FROM "{ARCHIVE.table}"')}
        assert left == kept_ids
        with connect("test-count") as conn:
            found = history.partitions(conn, ARCHIVE)
        assert all(p.attached_to for p in found)  # no partition left detached
        assert min(p.day for p in found) >= today - dt.timedelta(days=7)
    finally:
        mq.drop(QUEUE)
