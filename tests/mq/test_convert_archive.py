"""Converting an existing queue's plain archive into day partitions, online, at both
doors (``mq.convert_archive_partitioned`` and the SQL API's
``convert_archive_partitioned``): no archived message moves or is lost, archives go
on, and retention drops the old archive whole once its last day is past."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from django.db import connection
from django.db import connections as django_connections

from django_pgqueue import history, mq
from django_pgqueue.db import connect
from django_pgqueue.maintenance import make_partitions
from django_pgqueue.mq import partitions
from django_pgqueue.mq import store as mq_store
from django_pgqueue.mq.exceptions import QueueExists, QueueInUse, QueueNotFound

from .test_partitioned_archive import WEEK, days, relkind, today
from .test_sql_api import one

pytestmark = pytest.mark.django_db(transaction=True)


def fill(name: str, ages_in_days: list[int], per_day: int = 10) -> int:
    """Archive ``per_day`` messages through the API, then age them: ``per_day`` more
    for each age, archived that many days ago. Returns how many are archived."""
    total = 0
    for age in [0, *ages_in_days]:
        ids = mq.send_batch(name, [{"age": age, "i": i} for i in range(per_day)])
        mq.archive(name, ids)
        if age:
            with connection.cursor() as cursor:
                cursor.execute(
                    f'UPDATE "pgqueue_mq_a_{name}" SET archived_at = now() - %s'
                    " WHERE msg_id = ANY(%s)",
                    [dt.timedelta(days=age), ids],
                )
        total += len(ids)
    return total


def archived(name: str) -> list[int]:
    return sorted(row[0] for row in mq_store.browse(name, archived=True, limit=10_000))


def check_constraints(name: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname FROM pg_constraint WHERE contype = 'c' AND conrelid IN "
            "(SELECT oid FROM pg_class WHERE relname LIKE %s)",
            [f"pgqueue_mq_a_{name}%"],
        )
        return [row[0] for row in cursor.fetchall()]


def test_a_plain_archive_becomes_partitioned_and_keeps_every_message():
    mq.create("conv")
    total = fill("conv", [3, 10, 40])
    before = archived("conv")
    assert len(before) == total == 40
    waiting = mq.send("conv", {"still": "waiting"})

    info = mq.convert_archive_partitioned("conv", archive_retention=WEEK)

    assert info.archive_retention == WEEK == mq.get_queue("conv").archive_retention
    assert relkind("pgqueue_mq_a_conv") == "p"
    assert archived("conv") == before  # nothing moved, nothing lost
    first = today()
    cutoff = first + dt.timedelta(days=partitions.CONVERT_CUTOFF_DAYS)
    # The old archive is the partition of every day before the cutoff; the days after
    # it are made up to the usual runway.
    assert days("conv") == [
        cutoff - dt.timedelta(days=1),
        *(cutoff + dt.timedelta(days=n) for n in range(history.PREMADE_DAYS - 1)),
    ]
    with connect("test-convert") as conn:
        (legacy,) = [
            p for p in history.partitions(conn, partitions.family("conv")) if p.from_minvalue
        ]
        assert legacy.covers(first) and legacy.end.date() == cutoff
        assert partitions.maintain(conn, retention=False).partitions_made == 0
    assert make_partitions_report_for("conv") == 0
    # The queue works on: its waiting message, new archives (into today's days).
    (message,) = mq.read("conv", vt=30)
    assert message.msg_id == waiting
    assert mq.archive("conv", waiting) == [waiting]
    assert archived("conv") == sorted([*before, waiting])
    # Idempotent with the same retention; another retention is refused, naming it.
    assert mq.convert_archive_partitioned("conv", WEEK).archive_retention == WEEK
    with pytest.raises(QueueExists, match="partitioned already"):
        mq.convert_archive_partitioned("conv", dt.timedelta(days=30))


def make_partitions_report_for(name: str) -> int:
    """Partitions pgqueue_prune's pass would make for queue ``name``'s archive."""
    with connect("test-make") as conn:
        make_partitions(conn)  # the job history's and the attempt log's, if missing
        return history.ensure_partitions(conn, family=partitions.family(name))


def test_retention_drops_the_old_archive_whole_once_its_last_day_is_past():
    mq.create("aging")
    fill("aging", [5, 60])
    mq.convert_archive_partitioned("aging", archive_retention=WEEK)
    cutoff = today() + dt.timedelta(days=partitions.CONVERT_CUTOFF_DAYS)
    with connect("test-retention") as conn:
        # Until the last day it holds is past the retention, it stays, every row.
        almost = dt.datetime.combine(cutoff, dt.time(), tzinfo=dt.UTC) + WEEK
        kept = partitions.drop_expired(conn, now=almost - dt.timedelta(seconds=1))
        assert kept.dropped == {}
        gone = partitions.drop_expired(conn, now=almost + dt.timedelta(seconds=1))
    assert list(gone.dropped) == [f"pgqueue_mq_a_aging@{cutoff - dt.timedelta(days=1):%Y%m%d}"]
    assert archived("aging") == []
    assert relkind("pgqueue_mq_a_aging") == "p"


def test_a_bad_call_is_refused_before_anything_is_written():
    with pytest.raises(QueueNotFound, match="'nowhere' does not exist"):
        mq.convert_archive_partitioned("nowhere", WEEK)
    mq.create("plain")
    for retention, error in [(0, "more than 0"), ("7 days", "timedelta or a number")]:
        with pytest.raises(ValueError, match=error):
            mq.convert_archive_partitioned("plain", retention)
    with pytest.raises(ValueError, match="too long for a partitioned archive"):
        mq.create("p" * 42)
        mq.convert_archive_partitioned("p" * 42, WEEK)
    assert relkind("pgqueue_mq_a_plain") == "r"
    assert check_constraints("plain") == []


def test_an_archive_in_use_is_left_as_it_was_with_no_check_behind():
    mq.create("busy")
    fill("busy", [2])
    before = archived("busy")
    # A long report reading the archive holds its lock.
    with connect("test-holder") as holder, holder.transaction():
        holder.execute('LOCK TABLE "pgqueue_mq_a_busy" IN ACCESS SHARE MODE')
        with pytest.raises(QueueInUse, match=r"not granted within 2 s.*nothing was changed"):
            mq.convert_archive_partitioned("busy", WEEK)
    assert relkind("pgqueue_mq_a_busy") == "r"
    assert mq.get_queue("busy").archive_retention is None
    assert check_constraints("busy") == []
    assert archived("busy") == before
    # Once the lock is gone, the same call converts it.
    assert mq.convert_archive_partitioned("busy", WEEK).archive_retention == WEEK
    assert archived("busy") == before


def test_a_conversion_interrupted_after_its_check_is_run_again_from_the_start():
    """A kill -9 between the check and the swap leaves the check (it would refuse
    archives after its cutoff): the next conversion takes it away and starts over."""
    mq.create("halfway")
    fill("halfway", [1])
    steps = partitions.conversion_ddl("halfway", today() - dt.timedelta(days=1))
    with connection.cursor() as cursor:
        for statement in steps["check"]:
            cursor.execute(statement.as_string(None))
    assert check_constraints("halfway") == ["pgqueue_mq_a_halfway@before"]
    mq.convert_archive_partitioned("halfway", WEEK)
    assert relkind("pgqueue_mq_a_halfway") == "p"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = %s",
            ["pgqueue_mq_a_halfway@before"],
        )
        (definition,) = cursor.fetchone()
    cutoff = today() + dt.timedelta(days=partitions.CONVERT_CUTOFF_DAYS)
    assert cutoff.isoformat() in definition  # the new cutoff, not the interrupted one's


def test_the_sql_api_converts_with_the_same_statements(sql_api):
    one("SELECT pgmq_test.create('sqlconv')")
    (msg_id,) = one("SELECT * FROM pgmq_test.send('sqlconv', '{\"n\": 1}'::jsonb)")[0]
    assert one("SELECT pgmq_test.archive('sqlconv', %s::bigint)", msg_id) == [(True,)]
    one("SELECT pgmq_test.convert_archive_partitioned('sqlconv', '1 day', '7 days')")
    assert mq.get_queue("sqlconv").archive_retention == WEEK
    assert relkind("pgqueue_mq_a_sqlconv") == "p"
    assert one('SELECT msg_id FROM "pgqueue_mq_a_sqlconv"') == [(msg_id,)]
    assert one("SELECT is_partitioned FROM pgmq_test.meta WHERE queue_name = 'sqlconv'") == [
        (True,)
    ]
    # The same partitions as Python's conversion: maintenance has nothing to add.
    cutoff = today() + dt.timedelta(days=partitions.CONVERT_CUTOFF_DAYS)
    assert days("sqlconv")[0] == cutoff - dt.timedelta(days=1)
    with connect("test-sql-maintain") as conn:
        assert partitions.maintain(conn, retention=False).partitions_made == 0
    # Again: a notice, as in pgmq, and nothing changes.
    one("SELECT pgmq_test.convert_archive_partitioned('sqlconv', '1 day', '30 days')")
    assert mq.get_queue("sqlconv").archive_retention == WEEK


def test_the_sql_api_conversion_leaves_the_callers_lock_timeout_as_it_was(sql_api):
    """The function's 2-second lock wait ends with the function: a caller converting
    inside its own transaction keeps its own lock_timeout for what follows."""
    one("SELECT pgmq_test.create('sqltimeout')")
    with connect("test-sql-timeout") as conn, conn.transaction():
        conn.execute("SET LOCAL lock_timeout = '7s'")
        conn.execute(
            "SELECT pgmq_test.convert_archive_partitioned('sqltimeout', '1 day', '7 days')"
        )
        assert conn.execute("SHOW lock_timeout").fetchone() == ("7s",)
    assert relkind("pgqueue_mq_a_sqltimeout") == "p"


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("SELECT pgmq_test.convert_archive_partitioned('sq')", "numeric intervals"),
        (
            "SELECT pgmq_test.convert_archive_partitioned('sq', '1 hour', '7 days')",
            "must be '1 day'",
        ),
        (
            "SELECT pgmq_test.convert_archive_partitioned('sq', '1 day', '0 days')",
            "pgqueue_mq_archive_retention_range",
        ),
        (
            "SELECT pgmq_test.convert_archive_partitioned('missing', '1 day', '7 days')",
            "'missing' does not exist",
        ),
    ],
)
def test_the_sql_api_refuses_a_conversion_it_cannot_keep(sql_api, query, error):
    one("SELECT pgmq_test.create('sq')")
    with pytest.raises(Exception, match=error):
        one(query)
    assert relkind("pgqueue_mq_a_sq") == "r"
    assert mq.get_queue("sq").archive_retention is None
    assert check_constraints("sq") == []


def test_a_swap_that_fails_takes_its_check_away_and_changes_nothing():
    mq.create("clash")
    fill("clash", [1])
    cutoff = today() + dt.timedelta(days=partitions.CONVERT_CUTOFF_DAYS)
    squatter = f"pgqueue_mq_a_clash@{cutoff - dt.timedelta(days=1):%Y%m%d}"
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE TABLE "{squatter}" (x int)')
    with pytest.raises(Exception, match="already exists"):
        mq.convert_archive_partitioned("clash", WEEK)
    assert relkind("pgqueue_mq_a_clash") == "r"
    assert mq.get_queue("clash").archive_retention is None
    assert check_constraints("clash") == []
    with connection.cursor() as cursor:
        cursor.execute(f'DROP TABLE "{squatter}"')


def test_archives_go_on_while_the_archive_is_converted():
    """Online: a producer sends and archives all through the conversion; every
    message it archived is in the partitioned archive, none twice."""
    mq.create("live")
    fill("live", [2, 20], per_day=500)
    done = threading.Event()
    archived_ids: list[int] = []
    failures: list[BaseException] = []

    def produce() -> None:
        try:
            while not done.is_set():
                ids = mq.send_batch("live", [{"n": 1}] * 5)
                mq.archive("live", ids)
                archived_ids.extend(ids)
        except BaseException as exc:  # reported below
            failures.append(exc)
        finally:
            django_connections.close_all()

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        time.sleep(0.2)
        mq.convert_archive_partitioned("live", WEEK)
        time.sleep(0.2)
    finally:
        done.set()
        producer.join(30)
    assert failures == []
    assert len(archived_ids) > 10
    stored = archived("live")
    assert len(stored) == len(set(stored)) == 1500 + len(archived_ids)
    assert set(archived_ids) <= set(stored)
