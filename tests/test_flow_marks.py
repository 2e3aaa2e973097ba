"""The flow-control mark (``flow_controlled``): only jobs of queues that have a row
are in the flow claim's index, and the mark stays true to the rows whatever way a
job was written and whatever raced with it.

Two races leave a job with the wrong mark, and each is tested here with the
real statements on two real connections:

* a transaction that wrote a job before its queue got its first row commits
  after the row (the job is unmarked in a queue under limits): the plain claim
  marks it instead of running it, so the limits and the pause hold;
* a transaction that saw a row writes a job, and the row is dropped (a worker's
  settings no longer name the queue): the store's once-a-second check clears the
  mark, so the job is never stranded.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction
from django.test import override_settings

from django_pgqueue import enqueue_many, queues, sql
from django_pgqueue.db import connect, connection_params
from django_pgqueue.jobs import store
from django_pgqueue.jobs.store import COPY_THRESHOLD
from django_pgqueue.models import Job, Queue
from django_pgqueue.workflows import call, chain
from testproject.demo import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def _params(limit: int = 20) -> dict[str, Any]:
    return {"all_queues": True, "queues": [], "limit": limit, "lease": 30.0, "worker_id": "t"}


def claim(limit: int = 20) -> list[Any]:
    store.forget_configured()  # as a worker a second later: the check runs
    with connect("flow-marks") as conn:
        return store.claim(conn, _params(limit))


def marks(queue: str) -> Counter[bool]:
    return Counter(Job.objects.filter(queue_name=queue).values_list("flow_controlled", flat=True))


def _raw_enqueue(conn: psycopg.Connection, queue: str) -> None:
    """The enqueue statement itself (INSERT_JOB) on a connection of the test's own."""
    values = store.NewJobs(
        priority=0,
        max_attempts=3,
        run_after=None,
        task_path=tasks.noop.module_path,
        queue_name=queue,
        backend="default",
    ).values("[]", "{}")
    conn.execute(sql.INSERT_JOB, values)


def test_every_way_of_writing_a_job_marks_it_by_its_queue_row():
    queues.configure("limited", concurrency=5)
    for queue in ("limited", "free"):
        task = tasks.noop.using(queue_name=queue)
        task.enqueue()  # one row
        task.using(concurrency_key="k").enqueue()  # keyed
        enqueue_many(task, [((), {})] * 3)  # one INSERT
        enqueue_many(task, [((), {})] * COPY_THRESHOLD)  # COPY
        chain(call(task), call(task)).enqueue()  # workflow steps
    total = 1 + 1 + 3 + COPY_THRESHOLD + 2
    assert marks("limited") == {True: total}
    assert marks("free") == {False: total}


def test_the_first_configuration_marks_the_backlog_and_its_waiting_steps():
    task = tasks.noop.using(queue_name="reports")
    enqueue_many(task, [((), {})] * 5)
    chain(call(task), call(task)).enqueue()  # a pending root and a waiting step
    assert marks("reports") == {False: 7}
    queues.configure("reports", concurrency=2)
    assert marks("reports") == {True: 7}
    assert Counter(j.queue_name for j in claim()) == {"reports": 2}


def test_a_job_written_before_the_first_pause_commits_after_it_and_stays_paused():
    with psycopg.connect(**connection_params()) as other:
        _raw_enqueue(other, "incident")  # its statement saw no row: unmarked
        queues.pause("incident")  # commits while that transaction is open
        other.commit()
    assert marks("incident") == {False: 1}
    tasks.noop.using(queue_name="default").enqueue()
    assert [j.queue_name for j in claim()] == ["default"]  # the straggler did not run
    assert marks("incident") == {True: 1}  # it was marked instead
    assert claim() == []
    queues.resume("incident")
    assert [j.queue_name for j in claim()] == ["incident"]


def test_stragglers_of_a_limited_queue_run_under_its_limit():
    with psycopg.connect(**connection_params()) as other:
        for _ in range(4):
            _raw_enqueue(other, "reports")
        queues.configure("reports", concurrency=1)
        other.commit()
    assert marks("reports") == {False: 4}
    running = [j.queue_name for j in claim()] + [j.queue_name for j in claim()]
    assert running == ["reports"]  # marked by the first claim, one taken by the next
    assert Job.objects.filter(queue_name="reports", status="in_progress").count() == 1
    assert set(Job.objects.filter(queue_name="reports").values_list("attempts", flat=True)) <= {
        0,
        1,
    }


def test_a_job_marked_for_a_row_that_was_dropped_is_not_stranded():
    reports = {"reports": {"concurrency": 1}}
    with override_settings(PGQUEUE={"QUEUES": reports}):
        queues.apply_settings()
    with psycopg.connect(**connection_params()) as other:
        _raw_enqueue(other, "reports")  # saw the row: marked
        with override_settings(PGQUEUE={"QUEUES": {}}):
            assert queues.apply_settings() == (0, 1)  # the row goes, in another transaction
        other.commit()
    assert not Queue.objects.filter(name="reports").exists()
    assert marks("reports") == {True: 1}
    assert [j.queue_name for j in claim()] == ["reports"]  # the check cleared the mark


def test_settings_that_drop_a_queue_unmark_its_jobs_and_a_new_entry_marks_them():
    reports = {"reports": {"concurrency": 2}}
    tasks.noop.using(queue_name="reports").enqueue()
    with override_settings(PGQUEUE={"QUEUES": reports}):
        assert queues.apply_settings() == (1, 0)
    assert marks("reports") == {True: 1}
    with override_settings(PGQUEUE={"QUEUES": {}}):
        assert queues.apply_settings() == (0, 1)
    assert marks("reports") == {False: 1}
    assert [j.queue_name for j in claim()] == ["reports"]


def test_the_flow_index_holds_only_marked_jobs():
    enqueue_many(tasks.noop, [((), {})] * 50)
    queues.configure("limited", concurrency=1)
    enqueue_many(tasks.noop.using(queue_name="limited"), [((), {})] * 3)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index AS i "
            "JOIN pg_class AS c ON c.oid = i.indexrelid WHERE c.relname = 'pgq_job_flow_due_idx'"
        )
        (predicate,) = cursor.fetchone()
        assert "flow_controlled" in predicate
        with transaction.atomic():
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) SELECT count(*) FROM pgqueue_job"
                " WHERE flow_controlled AND status IN ('pending', 'failed')"
            )
            plan = cursor.fetchone()[0][0]["Plan"]
    scans = []

    def walk(node: dict[str, Any]) -> None:
        scans.append(node)
        for child in node.get("Plans", []):
            walk(child)

    walk(plan)
    flow = [n for n in scans if n.get("Index Name") == "pgq_job_flow_due_idx"]
    assert flow and flow[0]["Actual Rows"] == 3
