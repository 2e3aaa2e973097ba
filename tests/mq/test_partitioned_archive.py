"""Partitioned archives: a queue created with ``archive_retention`` keeps its archive
in day partitions, made ahead by the create and by maintenance, and dropped whole by
retention; at both doors (Python and the SQL API), with the same rules."""

from __future__ import annotations

import datetime as dt
import io
import time

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

from django_pgqueue import history, mq, status
from django_pgqueue.db import connect
from django_pgqueue.maintenance import make_partitions, prune
from django_pgqueue.mq import partitions
from django_pgqueue.mq import store as mq_store

from .test_sql_api import one

pytestmark = pytest.mark.django_db(transaction=True)

WEEK = dt.timedelta(days=7)


def days(name: str) -> list[dt.date]:
    with connect("test-partitions") as conn:
        return sorted(
            p.day for p in history.partitions(conn, partitions.family(name)) if p.attached_to
        )


def today() -> dt.date:
    with connect("test-today") as conn:
        return conn.execute("SELECT (now() AT TIME ZONE 'UTC')::date").fetchone()[0]


def relkind(table: str) -> str | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind::text FROM pg_class WHERE relname = %s", [table])
        row = cursor.fetchone()
    return row[0] if row else None


def archive_on(name: str, day: dt.date, rows: int) -> None:
    """``rows`` archived messages of ``day`` (noon UTC), its partition made first."""
    family = partitions.family(name)
    with connect("test-fill") as conn:
        history.create_partition(conn, partitions.KEY, day, family)
        conn.execute(
            f'INSERT INTO "{family.table}" (msg_id, archived_at, vt, message)'
            " SELECT i, %s, now(), '{}'::jsonb FROM generate_series(1, %s) AS i",
            (dt.datetime.combine(day, dt.time(12), tzinfo=dt.UTC), rows),
        )
        conn.execute(f'ANALYZE "{family.name(partitions.KEY, day)}"')  # retention's estimate


def drop_day(name: str, day: dt.date) -> None:
    """Drop one day partition of ``name``'s archive: a maintenance that did not run."""
    with connect("test-drop-day") as conn:
        conn.execute(f'DROP TABLE "{partitions.family(name).name(partitions.KEY, day)}"')


def test_a_partitioned_archive_has_its_days_made_by_the_create():
    info = mq.create("kept", archive_retention=WEEK)
    assert info.archive_retention == WEEK
    assert mq.get_queue("kept").archive_retention == WEEK
    assert relkind("pgqueue_mq_a_kept") == "p"
    first = today()
    assert days("kept") == [first + dt.timedelta(days=n) for n in range(history.PREMADE_DAYS + 1)]
    # Every message operation works on it as on a plain archive.
    msg_id = mq.send("kept", {"n": 1})
    (message,) = mq.read("kept", vt=30)
    assert mq.archive("kept", message.msg_id, read_ct=message.read_ct) == [msg_id]
    assert [row[0] for row in mq_store.browse("kept", archived=True)] == [msg_id]
    assert mq_store.status("kept").archived_estimate == 1
    # Idempotent with the same options; another retention is another queue.
    assert mq.create("kept", archive_retention=7 * 24 * 3600.0) == mq.get_queue("kept")
    with pytest.raises(mq.QueueExists, match=r"archive_retention=datetime\.timedelta"):
        mq.create("kept", archive_retention=dt.timedelta(days=1))
    with pytest.raises(mq.QueueExists, match="archive_retention=None"):
        mq.create("plain")
        mq.create("plain", archive_retention=WEEK)
    assert mq.drop("kept") is True
    assert relkind("pgqueue_mq_a_kept") is None and days("kept") == []


def test_names_with_capitals_and_dashes_keep_their_own_partitions():
    """Each queue's partitions are found by name: ``a``'s never include ``a_p``'s, and a
    name that needs quoting (capitals, ``-``) works at every step."""
    names = ("My-Queue_1", "a", "a_p")
    for name in names:
        mq.create(name, archive_retention=dt.timedelta(days=3))
    for name in names:
        assert len(days(name)) == history.PREMADE_DAYS + 1
    with connect("test-maintain") as conn:
        assert partitions.maintain(conn, retention=True).partitions_made == 0
    msg_id = mq.send("My-Queue_1", {"n": 1})
    assert mq.archive("My-Queue_1", msg_id) == [msg_id]
    assert mq.drop("a") is True
    assert len(days("a_p")) == history.PREMADE_DAYS + 1


@pytest.mark.parametrize(
    ("name", "retention", "error"),
    [
        ("q", 0, "more than 0"),
        ("q", -5.0, "more than 0"),
        ("q", float("nan"), "finite"),
        ("q", float("inf"), "finite"),
        ("q", dt.timedelta(0), "more than 0"),
        ("q", dt.timedelta(days=40_000), "at most 36600 days"),
        ("q", "7 days", "a timedelta or a number of seconds"),
        ("q", True, "a timedelta or a number of seconds"),
        ("q" * 42, WEEK, "too long for a partitioned archive: at most 41"),
    ],
)
def test_a_bad_retention_is_refused_before_anything_is_written(name, retention, error):
    with pytest.raises(ValueError, match=error):
        mq.create(name, archive_retention=retention)
    assert mq.list_queues() == []
    assert relkind("pgqueue_mq_q_" + name) is None


def test_retention_drops_whole_days_once_they_are_past_and_keeps_the_rest():
    mq.create("kept", archive_retention=dt.timedelta(days=2))
    first = today()
    archive_on("kept", first - dt.timedelta(days=10), 500)
    archive_on("kept", first - dt.timedelta(days=2), 20)  # ends less than 2 days ago
    archive_on("kept", first, 3)
    with connect("test-drop") as conn:
        dry = partitions.drop_expired(conn, dry_run=True)
    assert dry.by_queue == {"kept": 500}
    assert len(days("kept")) == 2 + history.PREMADE_DAYS + 1  # nothing dropped by a dry run
    lines: list[str] = []
    report = prune(progress=lines.append)
    assert report.partitions_dropped == [
        f"pgqueue_mq_a_kept@{first - dt.timedelta(days=10):%Y%m%d}"
    ]
    assert report.deleted["pgqueue_mq_a_kept"] == {"older": 500}
    assert any("pgqueue_mq_a_kept@" in line and "dropped" in line for line in lines)
    with connection.cursor() as cursor:
        cursor.execute('SELECT count(*) FROM "pgqueue_mq_a_kept"')
        assert cursor.fetchone()[0] == 23


def test_maintenance_makes_missing_days_and_drops_with_maintenance_retention():
    mq.create("kept", archive_retention=dt.timedelta(days=1))
    first = today()
    archive_on("kept", first - dt.timedelta(days=5), 10)
    drop_day("kept", first + dt.timedelta(days=history.PREMADE_DAYS))
    assert len(days("kept")) == history.PREMADE_DAYS + 1  # the old day, and 3 ahead
    with connect("test-maintain") as conn:
        report = partitions.maintain(conn, retention=False)
        assert report.partitions_made == 1 and report.dropped == {}
        report = partitions.maintain(conn, retention=True)
    assert report.partitions_made == 0 and report.by_queue == {"kept": 10}
    assert list(report.dropped) == [f"pgqueue_mq_a_kept@{first - dt.timedelta(days=5):%Y%m%d}"]
    assert days("kept") == [first + dt.timedelta(days=n) for n in range(history.PREMADE_DAYS + 1)]


def test_a_daily_prune_keeps_the_days_made_where_no_worker_runs():
    """A database used only through the SQL API runs no worker: ``pgqueue_prune`` from
    cron makes the days ahead, as the maintenance does, and says so."""
    mq.create("kept", archive_retention=WEEK)
    first = today()
    for n in range(1, history.PREMADE_DAYS + 1):
        drop_day("kept", first + dt.timedelta(days=n))
    assert days("kept") == [first]
    assert prune(dry_run=True).partitions_made == 0 and days("kept") == [first]
    # The job history and the attempt log get their days ahead first (a test database
    # lacked them in the first hours of a UTC day): only the queue's are missing, and
    # the count below is theirs.
    with connect("test-days-ahead") as conn:
        history.ensure_partitions(conn)
        history.ensure_partitions(conn, family=history.ATTEMPT_LOG)
    out = io.StringIO()
    call_command("pgqueue_prune", stdout=out)
    assert f"Made {history.PREMADE_DAYS} day partition(s) ahead." in out.getvalue()
    assert days("kept") == [first + dt.timedelta(days=n) for n in range(history.PREMADE_DAYS + 1)]
    assert not any("'kept'" in w for w in status.snapshot()["warnings"])


@override_settings(PGQUEUE={"MAINTENANCE_INTERVAL": 0.2, "MAINTENANCE_RETENTION": True})
def test_a_running_worker_keeps_the_days_made_and_drops_the_old(run_worker):
    mq.create("kept", archive_retention=dt.timedelta(days=1))
    first = today()
    archive_on("kept", first - dt.timedelta(days=3), 5)
    drop_day("kept", first + dt.timedelta(days=history.PREMADE_DAYS))
    run_worker(burst=False, housekeeping=True)
    wanted = [first + dt.timedelta(days=n) for n in range(history.PREMADE_DAYS + 1)]
    deadline = time.monotonic() + 20
    while days("kept") != wanted:
        assert time.monotonic() < deadline, days("kept")
        time.sleep(0.1)


def test_status_warns_before_an_archive_runs_out_of_days():
    mq.create("kept", archive_retention=WEEK)
    first = today()
    for n in range(1, history.PREMADE_DAYS + 1):
        drop_day("kept", first + dt.timedelta(days=n))
    data = status.snapshot()
    assert any("the archive of message queue 'kept'" in w for w in data["warnings"])
    assert not any("'kept'" in p for p in data["problems"])
    drop_day("kept", first)
    data = status.snapshot()
    assert any(
        "the archive of message queue 'kept' has partitions for no day" in p
        for p in data["problems"]
    )
    with pytest.raises(mq.ArchiveNotReady, match="pgqueue_prune"):
        mq.send("kept", {"n": 1})
        (message,) = mq.read("kept", vt=30)
        mq.archive("kept", message.msg_id)
    assert mq_store.status("kept").messages == 1  # the failed archive moved nothing


def test_an_archive_with_no_day_says_what_makes_it_and_loses_nothing():
    """Where neither a worker's maintenance nor a daily ``pgqueue_prune`` has run for
    days, the archive has no partition for today. Archiving is refused with an error
    that names the queue and the command that makes the days; the messages stay in
    the queue, fenced archives and deletes alike, and archive once it has run."""
    mq.create("kept", archive_retention=WEEK)
    first = today()
    for n in range(history.PREMADE_DAYS + 1):
        drop_day("kept", first + dt.timedelta(days=n))
    ids = [mq.send("kept", {"n": n}) for n in range(3)]
    with pytest.raises(mq.ArchiveNotReady) as refused:
        mq.archive("kept", ids[0])
    assert "'kept'" in str(refused.value) and "pgqueue_prune" in str(refused.value)
    assert isinstance(refused.value, mq.QueueError)
    (message,) = mq.read("kept", vt=30)
    with pytest.raises(mq.ArchiveNotReady):
        mq.archive("kept", message.msg_id, read_ct=message.read_ct)
    assert mq.delete("kept", ids[2]) == [ids[2]]  # a delete needs no archive
    assert mq_store.status("kept").messages == 2
    call_command("pgqueue_prune", stdout=io.StringIO())
    assert mq.archive("kept", ids[:2]) == ids[:2]
    with connection.cursor() as cursor:
        cursor.execute('SELECT count(*) FROM "pgqueue_mq_a_kept"')
        assert cursor.fetchone()[0] == 2


def test_the_sql_api_creates_the_same_partitioned_archive(sql_api):
    one("SELECT pgmq_test.create_partitioned('sqlq', '1 day', '7 days')")
    assert mq.get_queue("sqlq").archive_retention == WEEK
    assert relkind("pgqueue_mq_a_sqlq") == "p"
    first = today()
    # The partitions Python's maintenance finds, named and bounded as its own.
    assert days("sqlq") == [first + dt.timedelta(days=n) for n in range(history.PREMADE_DAYS + 1)]
    with connect("test-maintain") as conn:
        assert partitions.maintain(conn, retention=False).partitions_made == 0
    assert one("SELECT is_partitioned FROM pgmq_test.list_queues() WHERE queue_name = 'sqlq'") == [
        (True,)
    ]
    (msg_id,) = one("SELECT * FROM pgmq_test.send('sqlq', '{\"n\": 1}'::jsonb)")[0]
    assert one("SELECT pgmq_test.archive('sqlq', %s::bigint)", msg_id) == [(True,)]
    assert one('SELECT msg_id FROM "pgqueue_mq_a_sqlq"') == [(msg_id,)]
    assert one("SELECT pgmq_test.drop_queue('sqlq')") == [(True,)]
    assert days("sqlq") == []


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("SELECT pgmq_test.create_partitioned('p')", r"numeric intervals .* are not supported"),
        ("SELECT pgmq_test.create_partitioned('p', '1 day', '5000')", "numeric intervals"),
        ("SELECT pgmq_test.create_partitioned('p', '1 hour', '7 days')", "must be '1 day'"),
        ("SELECT pgmq_test.create_partitioned('p', '1 day', 'soon')", "invalid input syntax"),
        (
            "SELECT pgmq_test.create_partitioned('p', '1 day', '0 days')",
            "pgqueue_mq_archive_retention_range",
        ),
        (
            "SELECT pgmq_test.create_partitioned('p', '1 day', '-1 day')",
            "pgqueue_mq_archive_retention_range",
        ),
        (
            f"SELECT pgmq_test.create_partitioned('{'p' * 42}', '1 day', '7 days')",
            "pgqueue_mq_partitioned_name_length",
        ),
    ],
)
def test_the_sql_api_refuses_what_it_cannot_keep(sql_api, query, error):
    with pytest.raises(Exception, match=error):
        one(query)
    assert mq.list_queues() == []
    assert one("SELECT count(*) FROM pg_class WHERE relname ~ '^pgqueue_mq_[qa]_p'") == [(0,)]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_retention_of_a_million_archived_messages_writes_almost_no_wal():
    """A plain archive is emptied by DELETE, row by row; a partitioned one loses a
    day's million messages by a DETACH and a DROP: well under a second and 1 MB of
    WAL, whatever the row count."""
    million = 1_000_000
    mq.create("kept", archive_retention=dt.timedelta(days=1))
    archive_on("kept", today() - dt.timedelta(days=10), million)
    with connect("test-wal") as conn:
        make_partitions(conn)  # the days ahead, as a worker has them made: not retention
        conn.execute("CHECKPOINT")  # full-page writes of the fill are not retention's
        before = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        started = time.perf_counter()
        report = prune()
        seconds = time.perf_counter() - started
        after = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        (wal,) = conn.execute("SELECT pg_wal_lsn_diff(%s, %s)", (after, before)).fetchone()
        (left,) = conn.execute('SELECT count(*) FROM "pgqueue_mq_a_kept"').fetchone()
    print(f"\nretention of {million} archived messages: {seconds:.3f} s, {int(wal)} bytes of WAL")
    assert left == 0
    assert report.deleted["pgqueue_mq_a_kept"] == {"older": million}
    assert wal < 1024 * 1024
