"""The console's rollup: written with the completions it counts, pruned by age."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test import override_settings

from django_pgqueue import maintenance
from django_pgqueue.db import connect
from django_pgqueue.models import Job, Rollup
from django_pgqueue.rollup import histogram
from django_pgqueue.rollup import store as rollup_store
from testproject.demo import tasks

from ..support.tables import table_away

pytestmark = pytest.mark.django_db(transaction=True)


def _queue_rows(name: str) -> list[Rollup]:
    return list(Rollup.objects.filter(kind="queue", name=name))


def test_a_worker_counts_what_it_completes_per_queue_and_minute(run_worker):
    for i in range(5):
        tasks.add.enqueue(i, 1)
    tasks.send_receipt.enqueue(7)  # queue "emails"
    failing = tasks.always_fails.enqueue(1)  # 3 attempts: 2 retried, then dead
    Job.objects.filter(pk=int(failing.id)).update(max_attempts=2)
    run_worker(burst=True)
    from django_pgqueue.testing import run_queued_jobs

    run_queued_jobs()  # the retry, made due now: through the same JobSource
    default = _queue_rows("default")
    emails = _queue_rows("emails")
    assert sum(r.ok for r in default) == 5
    assert sum(r.retried for r in default) == 1
    assert sum(r.failed for r in default) == 1
    assert sum(r.ok for r in emails) == 1
    # Every counted attempt is in both histograms, once.
    assert sum(histogram.merge(r.wait_hist for r in default)) == 7
    assert sum(histogram.merge(r.run_hist for r in default)) == 7
    assert all(r.minute.second == 0 and r.minute.microsecond == 0 for r in default)


def test_counts_add_up_across_batches_in_one_minute(run_worker):
    for i in range(3):
        tasks.add.enqueue(i, 1)
    run_worker(burst=True)
    for i in range(4):
        tasks.add.enqueue(i, 1)
    run_worker(burst=True)
    rows = _queue_rows("default")
    assert sum(r.ok for r in rows) == 7
    assert sum(histogram.merge(r.run_hist for r in rows)) == 7


def test_nothing_is_counted_when_the_completion_writes_nothing():
    # A batch whose rows lost their lease: the completion writes none, so neither
    # does the rollup (same transaction, counted from the ids written).
    from django_pgqueue.outcomes import JobOutcome
    from django_pgqueue.worker.runner import TaskRunner
    from django_pgqueue.worker.sources import JobSource

    job = tasks.add.enqueue(1, 2)
    import uuid

    stale = JobOutcome(int(job.id), uuid.uuid4(), "succeeded", result_json="3")
    stale.queue_name = "default"
    with connect("test") as conn:
        assert JobSource(TaskRunner("w", 1.0)).write_outcomes(conn, [stale]) == set()
    assert _queue_rows("default") == []


def test_a_batch_with_a_lost_lease_counts_exactly_what_was_written():
    # The completion statement adds the batch's counts only if it wrote every row;
    # when one lease was lost, the rows it did write are counted right after.
    import uuid

    from django_pgqueue.outcomes import JobOutcome
    from django_pgqueue.worker.runner import TaskRunner
    from django_pgqueue.worker.sources import JobSource, tagged

    for i in range(2):
        tasks.add.enqueue(i, 1)
    source = JobSource(TaskRunner("w", 30.0))
    params = {"all_queues": True, "queues": [], "limit": 2, "lease": 30.0, "worker_id": "w"}
    with connect("test") as conn:
        held, lost = source.claim(conn, params)
        batch = [
            tagged(held, JobOutcome(held.id, held.token, "succeeded", result_json="1")),
            tagged(lost, JobOutcome(lost.id, uuid.uuid4(), "succeeded", result_json="2")),
        ]
        assert source.write_outcomes(conn, batch) == {held.id}
    (row,) = _queue_rows("default")
    assert (row.ok, row.failed, row.retried) == (1, 0, 0)
    assert sum(row.run_hist) == sum(row.wait_hist) == 1


@override_settings(PGQUEUE={"ROLLUP": False})
def test_rollup_off_writes_no_rows(run_worker):
    tasks.add.enqueue(1, 2)
    run_worker(burst=True)
    assert not Rollup.objects.exists()


def test_depth_is_sampled_once_a_minute_and_a_drained_queue_reads_zero():
    for i in range(3):
        tasks.add.enqueue(i, 1)
    with connect("test") as conn:
        rollup_store.sample_depth(conn)
        (row,) = _queue_rows("default")
        assert row.depth == 3
        Job.objects.all().delete()
        rollup_store.sample_depth(conn)  # the same minute: a worker did already
        (row,) = _queue_rows("default")
        assert row.depth == 3
        Rollup.objects.update(minute=row.minute - dt.timedelta(minutes=1))
        rollup_store.sample_depth(conn)
    now = [r for r in _queue_rows("default") if r.depth == 0]
    assert len(now) == 1  # seen in the last hour, nothing waiting now


def test_prune_deletes_minutes_past_the_retention_in_one_statement():
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_rollup (kind, name, minute, ok, failed, retried, wait_hist,"
            " run_hist) SELECT 'queue', 'q', date_trunc('minute', now()) - i * interval"
            " '1 hour', 1, 0, 0, '{}', '{}' FROM generate_series(0, 71) AS i"
        )
    with override_settings(PGQUEUE={"ROLLUP_RETENTION_SECONDS": 24 * 3600 + 60}):
        report = maintenance.prune()
    assert report.deleted["pgqueue_rollup"]["older"] == 47
    assert Rollup.objects.count() == 25


def test_a_refused_rollup_write_never_holds_up_the_completions(run_worker, caplog):
    tasks.add.enqueue(1, 2)
    with table_away("pgqueue_rollup"):
        run_worker(burst=True)
    assert list(Job.objects.values_list("status", flat=True)) == ["succeeded"]
    assert "Rollup write refused" in caplog.text
