"""Job history: the mover, the partitions, reads and replays from history, retention.

Finished jobs leave ``pgqueue_job`` for the partitioned ``pgqueue_job_history``
(history.py); everything that read them there still finds them.
"""

from __future__ import annotations

import datetime as dt
import logging

import pytest
from django.db import connection
from django.utils import timezone

from django_pgqueue import history, sql
from django_pgqueue.db import connect
from django_pgqueue.maintenance import prune
from django_pgqueue.models import Job, JobHistory
from django_pgqueue.operations import replay_from_history

DAY = dt.timedelta(days=1)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("clean_history")]


def finished(status: str = "succeeded", age: dt.timedelta = dt.timedelta(minutes=5), **fields):
    at = timezone.now() - age
    return Job.objects.create(
        task_path="testproject.demo.tasks.add",
        status=status,
        finished_at=fields.pop("finished_at", at if status != "cancelled" else None),
        updated_at=at,
        created_at=at,
        **fields,
    )


def move(**kwargs) -> history.MoveReport:
    with connect("test-mover") as conn:
        return history.move_finished(conn, **kwargs)


def test_history_has_every_column_of_the_live_table():
    """A column added to pgqueue_job must be added to the history too (the mover and
    the restore copy every column of the model)."""

    def columns(table: str) -> list[tuple[str, str]]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_name = %s ORDER BY ordinal_position",
                [table],
            )
            return cursor.fetchall()

    assert columns("pgqueue_job_history") == columns("pgqueue_job")
    assert {f.column for f in JobHistory._meta.concrete_fields} == set(history.job_columns())


def test_mover_moves_finished_jobs_only_after_the_delay():
    old_ok = finished("succeeded")
    old_dead = finished("dead")
    old_cancelled = finished("cancelled")  # never ran: no finished_at
    recent = finished("succeeded", age=dt.timedelta(seconds=1))
    waiting = Job.objects.create(task_path="testproject.demo.tasks.add")
    report = move(delay=60)
    assert report.moved == 3
    assert set(Job.objects.values_list("pk", flat=True)) == {recent.pk, waiting.pk}
    moved = {j.pk: j for j in JobHistory.objects.all()}
    assert set(moved) == {old_ok.pk, old_dead.pk, old_cancelled.pk}
    assert moved[old_ok.pk].finished_at == old_ok.finished_at
    # A job that never ran is filed under its last change.
    assert moved[old_cancelled.pk].finished_at == old_cancelled.updated_at
    # Every column came along.
    assert moved[old_dead.pk].status == "dead"
    assert moved[old_ok.pk].task_path == old_ok.task_path
    assert move(delay=60).moved == 0


def test_a_day_without_a_partition_is_made_and_nothing_is_lost():
    """No DEFAULT partition: a row of a day never premade (here 40 days ago, as an
    installation upgraded with old finished rows has) makes the batch fail whole; the
    mover makes the day and moves again."""
    old = [finished("succeeded", age=40 * DAY + i * DAY) for i in range(3)]
    report = move(delay=0)
    assert report.moved == 3 and report.partitions_made == 3
    assert set(JobHistory.objects.values_list("pk", flat=True)) == {j.pk for j in old}
    assert not Job.objects.exists()


def test_batches_continue_until_a_short_batch():
    jobs = [finished() for _ in range(25)]
    report = move(delay=0, batch_size=10)
    assert (report.moved, report.batches) == (25, 3)
    assert JobHistory.objects.count() == len(jobs)


def test_get_result_reads_history():
    from testproject.demo import tasks

    result = tasks.add.enqueue(2, 3)
    Job.objects.filter(pk=result.id).update(
        status="succeeded", result=5, finished_at=timezone.now(), updated_at=timezone.now()
    )
    assert move(delay=0).moved == 1
    assert not Job.objects.filter(pk=result.id).exists()
    fetched = tasks.add.get_result(result.id)
    assert fetched.return_value == 5
    assert fetched.status.name == "SUCCESSFUL"


def test_replay_from_history_puts_the_job_back_to_pending():
    job = finished("dead", last_error="boom", attempts=3)
    move(delay=0)
    result = replay_from_history([job.pk, 999_999])
    assert result.changed == {job.pk: "dead"}
    assert result.skipped == {999_999: "is not in the history"}
    live = Job.objects.get(pk=job.pk)
    assert (live.status, live.attempts) == ("pending", 0)
    assert not JobHistory.objects.filter(pk=job.pk).exists()


def test_replay_from_history_of_a_held_unique_key_loses_nothing():
    """A finished row frees its unique key (only live rows hold one), so a new job may
    hold it by the time the old one is replayed: the replay is skipped, and the row
    stays finished in pgqueue_job, where the mover files it again."""
    old = finished("succeeded", unique_key="k")
    move(delay=0)
    holder = Job.objects.create(task_path=old.task_path, unique_key="k")
    result = replay_from_history([old.pk])
    assert result.skipped == {old.pk: "its unique key is held by another live job"}
    assert Job.objects.get(pk=old.pk).status == "succeeded"
    assert Job.objects.get(pk=holder.pk).status == "pending"
    assert move(delay=0).moved == 1
    assert JobHistory.objects.filter(pk=old.pk).exists()


def test_retention_drops_whole_partitions_only_once_their_day_is_past():
    keep = finished("succeeded", age=2 * DAY)
    gone = [finished("succeeded", age=9 * DAY), finished("cancelled", age=40 * DAY)]
    dead = finished("dead", age=400 * DAY)
    move(delay=0)
    dry = prune(dry_run=True)
    assert dry.deleted[sql.HISTORY_TABLE] == {"succeeded": 1, "cancelled": 1}
    assert JobHistory.objects.count() == 4
    report = prune()
    assert report.deleted[sql.HISTORY_TABLE]["cancelled"] >= 0  # an estimate, per partition
    assert len(report.partitions_dropped) == 2
    left = set(JobHistory.objects.values_list("pk", flat=True))
    assert left == {keep.pk, dead.pk}
    assert not left & {j.pk for j in gone}


def test_an_interrupted_retention_is_finished_by_the_next():
    """A kill between DETACH and DROP leaves a detached partition: the next prune
    drops it (it was past its retention already)."""
    finished("succeeded", age=9 * DAY)
    move(delay=0)
    with connect("test-history") as conn:
        (part,) = history.partitions(conn)
        conn.execute(f'ALTER TABLE "{sql.HISTORY_TABLE}_succeeded" DETACH PARTITION "{part.name}"')
        assert history.partitions(conn)[0].attached_to is None
    report = prune()
    assert report.partitions_dropped == [part.name]
    with connect("test-history") as conn:
        left = history.partitions(conn)
    # What is left are the days ahead, which prune makes as the maintenance does.
    assert part.name not in {p.name for p in left}
    assert len(left) == report.partitions_made and all(p.attached_to for p in left)


def test_premade_partitions_and_the_maintenance_lock(caplog):
    caplog.set_level(logging.DEBUG, logger="django_pgqueue.history")
    with connect("test-a") as a, connect("test-b") as b:
        made = history.ensure_partitions(a, days_ahead=2)
        assert made == 9  # today and two days ahead, three states
        # A worker's first start makes a dozen; its maintenance line counts them
        # ("12 partitions made"), so each one's own line is DEBUG, not a dozen INFO lines.
        lines = [
            r for r in caplog.records if r.getMessage().startswith("Partition pgqueue_job_history_")
        ]
        assert len(lines) == 9 and {r.levelno for r in lines} == {logging.DEBUG}
        assert history.ensure_partitions(a, days_ahead=2) == 0
        # Another worker holding the lock: this one skips its pass.
        with b.transaction():
            b.execute(sql.TRY_MAINTENANCE_LOCK, (sql.MAINTENANCE_LOCK_KEY,))
            finished()
            assert move(delay=0).skipped
        assert move(delay=0).moved == 1
