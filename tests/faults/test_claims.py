"""Claim and lease correctness: exactly-once under load, LIMIT under an adversarial plan,
fencing of stale completions, races with a reclaim, unknown tasks, skewed clocks
(catalogue Q1, Q2, Q4, Q5, Q7, T1).
"""

from __future__ import annotations

import datetime as dt
import re
import signal
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from django_pgqueue import sql
from django_pgqueue.db import connect

from ..conftest import REPO
from .conftest import LEASE, worker_env
from .helpers import (
    backends,
    count_text,
    db_now,
    enqueue_sql,
    job,
    paused_fields,
    query,
    wait_terminal,
    wait_until,
)

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120), pytest.mark.django_db(transaction=True)]


def _claim_params(worker_id: str, limit: int = 10, lease: float = 30.0) -> dict:
    return {
        "all_queues": True,
        "queues": [],
        "limit": limit,
        "lease": lease,
        "worker_id": worker_id,
        "floor": None,  # a full claim
    }


def _complete_params(job_id: int, token, status: str = "succeeded") -> dict:
    return {
        "ids": [job_id],
        "tokens": [token],
        "statuses": [status],
        "results": ["1"],
        "delays": [0.0],
        "errors": [None],
        "last_errors": [None],
        "refunds": [0],
        "channel": "pgqueue_test",  # where released workflow steps are announced
    }


def test_load_20000_tasks_over_4_processes_run_exactly_once(worker_process, test_dsn, summary):
    """Q1 at load size: 0 lost, 0 run twice, sum(attempts) == tasks, nothing left running."""
    from django_pgqueue import enqueue_many
    from testproject.demo import tasks

    total = 20_000
    enqueue_many(tasks.record_run, [((), {})] * total)
    started = time.monotonic()
    sup = worker_process(
        "--processes",
        "4",
        "--burst",
        "--concurrency",
        "4",
        env=worker_env(PGQUEUE_LOG_LEVEL="WARNING", DATABASE_CONN_MAX_AGE="60"),
    )
    assert sup.wait(240) == 0, sup.output()
    elapsed = time.monotonic() - started
    (runs, distinct, attempts, running, succeeded) = query(
        test_dsn,
        "SELECT (SELECT count(*) FROM demo_taskrun),"
        " (SELECT count(DISTINCT job_id) FROM demo_taskrun),"
        " (SELECT sum(attempts) FROM pgqueue_job),"
        " (SELECT count(*) FROM pgqueue_job WHERE status = 'in_progress'),"
        " (SELECT count(*) FROM pgqueue_job WHERE status = 'succeeded')",
    )[0]
    # Every counted attempt leaves a trace: one worker id per claim (a refund takes
    # its claim's back) and, for each attempt before the last, its error entry (a
    # failure, or the LeaseExpired that the next claim of a lapsed row writes). An
    # attempt without one would be an attempt nobody can account for.
    untraced, extra = query(
        test_dsn,
        "SELECT count(*) FILTER (WHERE jsonb_array_length(worker_ids) <> attempts"
        "   OR jsonb_array_length(errors) <> attempts - 1),"
        " coalesce(jsonb_agg(errors) FILTER (WHERE attempts > 1), '[]')"
        " FROM pgqueue_job",
    )[0]
    assert untraced == 0, extra
    assert (runs, distinct, attempts, running, succeeded) == (total, total, total, 0, total), extra
    pids = query(test_dsn, "SELECT count(DISTINCT pid) FROM demo_taskrun")[0][0]
    assert pids == 4
    summary(
        faults=0,
        tasks=total,
        duplicates=runs - distinct,
        lost=total - succeeded,
        recover=elapsed,
        note=f"4 processes x 4 threads, {total / elapsed:.0f} jobs/s",
    )


def test_a_prefetched_row_whose_lease_lapsed_is_not_run_by_its_first_owner(test_dsn):
    """A row waiting in a worker's prefetch loses its lease (the lease keeper ran late,
    as on a loaded machine) and another worker claims it again: a second counted
    attempt, traced by its LeaseExpired entry. The first owner must then drop its copy
    unrun, not run the job a second time with a result nobody can store."""
    from django_pgqueue.worker import Worker
    from testproject.demo import tasks

    slow = int(tasks.record_run.enqueue(label="slow", sleep=2.0).id)
    waiting = int(tasks.record_run.enqueue(label="prefetched").id)
    # One thread, room for one prefetched row: the second job waits behind the first.
    worker = Worker(
        concurrency=1,
        prefetch=1,
        lease_seconds=0.6,
        burst=True,
        install_signal_handlers=False,
        notify=False,
        scheduler=False,
    )
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        wait_until(
            lambda: (
                query(
                    test_dsn,
                    "SELECT count(*) FROM pgqueue_job"
                    " WHERE status = 'in_progress' AND worker_id = %s",
                    (worker.worker_id,),
                )[0][0]
                == 2
            ),
            10,
            "both rows claimed",
        )
        # The lease lapses and another worker claims the row, in one transaction, so
        # the first owner's lease keeper cannot extend it in between; that worker
        # runs it and records its success.
        with connect("test-thief") as conn, conn.transaction():
            conn.execute(
                "UPDATE pgqueue_job SET locked_until = now() - interval '1 second' WHERE id = %s",
                (waiting,),
            )
            (row,) = conn.execute(sql.CLAIM_JOBS, _claim_params("thief", limit=1)).fetchall()
            assert row[0] == waiting
            conn.execute(sql.COMPLETE_JOBS, _complete_params(waiting, row[2]))
    finally:
        runner.join(30)
    assert not runner.is_alive()
    runs = query(test_dsn, "SELECT job_id FROM demo_taskrun ORDER BY job_id")
    assert runs == [(slow,)]  # the stolen row was not run again by its first owner
    assert worker.outcomes == {"succeeded": 1, "lease_lost": 1}
    (attempts, workers, errors) = query(
        test_dsn,
        "SELECT attempts, worker_ids, errors FROM pgqueue_job WHERE id = %s",
        (waiting,),
    )[0]
    # Every counted attempt left a trace: who claimed it, and how the lapsed one ended.
    assert attempts == 2 and workers == [worker.worker_id, "thief"]
    assert [(e["attempt"], e["exception_class_path"], e["worker_id"]) for e in errors] == [
        (1, "django_pgqueue.exceptions.LeaseExpired", worker.worker_id)
    ]


def test_claim_respects_limit_under_an_adversarial_plan(test_dsn):
    """Q2: nested loops forced; 50 concurrent claims of LIMIT 5 from 8 connections."""
    from django_pgqueue import enqueue_many
    from testproject.demo import tasks

    enqueue_many(tasks.noop, [((), {})] * 1000)
    conns = []
    for _ in range(8):
        conn = connect("test-q2")
        for knob in ("enable_hashjoin", "enable_mergejoin", "enable_material"):
            conn.execute(f"SET {knob} = off")
        conns.append(conn)
    locks = [threading.Lock() for _ in conns]

    def claim(i: int) -> tuple[int, int]:
        with locks[i % 8]:
            cur = conns[i % 8].execute(sql.CLAIM_JOBS, _claim_params(f"q2-{i}", limit=5))
            rows = cur.fetchall()
            return len(rows), cur.rowcount

    try:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(claim, range(50)))
    finally:
        for conn in conns:
            conn.close()
    assert all(n <= 5 and n == rowcount for n, rowcount in results), results
    claimed = sum(n for n, _ in results)
    assert claimed == 250
    (max_attempts, total_attempts) = query(
        test_dsn, "SELECT max(attempts), sum(attempts) FROM pgqueue_job"
    )[0]
    assert (max_attempts, total_attempts) == (1, claimed)
    # Static: each locking subquery is a MATERIALIZED CTE (PostgreSQL bug #15715).
    locks = re.findall(r"FOR UPDATE (?:OF \w+ )?SKIP LOCKED", sql.CLAIM_JOBS)
    assert sql.CLAIM_JOBS.count("AS MATERIALIZED") == len(locks) == 2
    assert " IN (SELECT" not in sql.CLAIM_JOBS.upper()


def test_stale_completion_is_fenced_within_one_process(test_dsn):
    """Q4: after a lapse and a reclaim, the old owner's completer writes nothing."""
    from django_pgqueue.outcomes import JobOutcome
    from django_pgqueue.worker import Worker
    from testproject.demo import tasks

    job_id = int(tasks.add.enqueue(1, 2).id)
    with connect("test-q4") as conn:
        (row_a,) = conn.execute(sql.CLAIM_JOBS, _claim_params("A")).fetchall()
        conn.execute(
            "UPDATE pgqueue_job SET locked_until = now() - interval '1 second' WHERE id = %s",
            (job_id,),
        )
        (row_b,) = conn.execute(sql.CLAIM_JOBS, _claim_params("B")).fetchall()
    token_a, token_b = row_a[2], row_b[2]
    assert token_a != token_b
    worker = Worker(concurrency=1, install_signal_handlers=False, notify=False)
    source = worker.sources[0]

    def write(token) -> None:
        outcome = JobOutcome(job_id, token, "succeeded", result_json="3", source=source.name)
        worker.completer.write(source, [outcome])

    thread = threading.Thread(target=write, args=(token_a,))  # a second thread of "A"
    thread.start()
    thread.join(10)
    assert worker.outcomes == {"lease_lost": 1}
    row = job(test_dsn, job_id)
    assert (row["status"], row["locked_by"]) == ("in_progress", token_b)
    write(token_b)
    assert worker.outcomes == {"lease_lost": 1, "succeeded": 1}
    row = job(test_dsn, job_id)
    assert (row["status"], row["locked_by"], row["attempts"]) == ("succeeded", token_b, 2)
    assert query(test_dsn, "SELECT result FROM pgqueue_job WHERE id = %s", (job_id,)) == [(3,)]
    worker.completer._drop_connection()


def test_reclaim_never_overwrites_a_completion_in_flight(test_dsn):
    """Q5: the lease lapsed while the owner's completion was being written. The reclaim skips
    the locked row; after the commit the row is succeeded with no lease-expiry entry."""
    from testproject.demo import tasks

    job_id = int(tasks.add.enqueue(1, 2).id)
    with connect("test-q5") as conn:
        (row_a,) = conn.execute(sql.CLAIM_JOBS, _claim_params("A", lease=0.2)).fetchall()
    lease_end = job(test_dsn, job_id)["locked_until"]
    wait_until(lambda: db_now(test_dsn) > lease_end, 5, "lease lapse")
    owner = psycopg.connect(test_dsn)  # not autocommit: the completion stays open
    try:
        assert owner.execute(sql.COMPLETE_JOBS, _complete_params(job_id, row_a[2])).fetchall()
        with connect("test-q5-reaper") as reaper:
            assert reaper.execute(sql.CLAIM_JOBS, _claim_params("B")).fetchall() == []
        owner.commit()
    finally:
        owner.close()
    row = job(test_dsn, job_id)
    assert (row["status"], row["errors"], row["attempts"]) == ("succeeded", [], 1)
    with connect("test-q5-later") as conn:
        assert conn.execute(sql.CLAIM_JOBS, _claim_params("C")).fetchall() == []


def test_completion_racing_a_reclaim_loses_cleanly(test_dsn):
    """Q5, the other order: the reclaim holds the row; the stale completion waits, then
    re-checks its guard against the new version and changes nothing."""
    from testproject.demo import tasks

    job_id = int(tasks.add.enqueue(1, 2).id)
    with connect("test-q5b") as conn:
        (row_a,) = conn.execute(sql.CLAIM_JOBS, _claim_params("A", lease=0.2)).fetchall()
    lease_end = job(test_dsn, job_id)["locked_until"]
    wait_until(lambda: db_now(test_dsn) > lease_end, 5, "lease lapse")
    reclaim = psycopg.connect(test_dsn)
    result: dict = {}
    try:
        (row_b,) = reclaim.execute(sql.CLAIM_JOBS, _claim_params("B")).fetchall()

        def stale() -> None:
            with connect("test-q5b-stale") as conn:
                result["rows"] = conn.execute(
                    sql.COMPLETE_JOBS, _complete_params(job_id, row_a[2])
                ).fetchall()

        thread = threading.Thread(target=stale)
        thread.start()
        wait_until(
            lambda: query(
                test_dsn,
                "SELECT count(*) FROM pg_stat_activity WHERE application_name ="
                " 'pgqueue-test-q5b-stale' AND wait_event_type = 'Lock'",
            )[0][0],
            5,
            "the stale completion to wait on the row lock",
        )
        reclaim.commit()
        thread.join(5)
    finally:
        reclaim.close()
    assert result["rows"] == []
    row = job(test_dsn, job_id)
    assert (row["status"], row["locked_by"], row["attempts"]) == ("in_progress", row_b[2], 2)


def test_unknown_task_waits_for_a_worker_that_has_it(worker_process, test_dsn, tmp_path, summary):
    """Q7: a rolling deploy. A worker without the task puts the job back (attempt refunded)
    again and again; it is never dead. A worker with the new code runs it."""
    package = tmp_path / "pgq_late_deploy"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(
        textwrap.dedent(
            """
            from django_pgqueue.compat import task

            @task()
            def double(x):
                return x * 2
            """
        )
    )
    (job_id,) = enqueue_sql(
        test_dsn, 1, task_path="pgq_late_deploy.tasks.double", args=[21], max_attempts=2
    )
    old = worker_process(env=worker_env(PGQUEUE_UNKNOWN_TASK_DELAY="0.2"))
    wait_until(lambda: count_text(old, "cannot be imported") >= 4, 20, "several put-backs")
    old.signal(signal.SIGTERM)
    assert old.wait(15) == 0
    row = job(test_dsn, job_id)
    assert (row["status"], row["attempts"]) == ("pending", 0), row
    assert "ImportError" in row["last_error"]
    new = worker_process(
        env=worker_env(PYTHONPATH=f"{tmp_path}:{REPO}", PGQUEUE_UNKNOWN_TASK_DELAY="0.2")
    )
    deployed = time.monotonic()
    wait_terminal(test_dsn, [job_id], timeout=15)
    row = job(test_dsn, job_id)
    assert (row["status"], row["attempts"]) == ("succeeded", 1)
    assert query(test_dsn, "SELECT result FROM pgqueue_job WHERE id = %s", (job_id,)) == [(42,)]
    new.signal(signal.SIGTERM)
    assert new.wait(15) == 0
    summary(
        faults=count_text(old, "cannot be imported"),
        tasks=1,
        duplicates=0,
        lost=0,
        recover=time.monotonic() - deployed,
        note="unknown task path until a deploy",
    )


FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


@pytest.mark.parametrize("skew", ["+3600s", "-3600s"])
def test_skewed_worker_clock_changes_no_lease(worker_process, test_dsn, skew, summary):
    """T1: a worker host an hour off writes leases on the database clock and never takes a
    live lease."""
    from pathlib import Path

    if not Path(FAKETIME_LIB).exists():
        pytest.skip(f"libfaketime is not installed ({FAKETIME_LIB}); apt-get install faketime")
    held = enqueue_sql(test_dsn, 1)[0]
    with connect("test-t1") as conn:
        (row_held,) = conn.execute(sql.CLAIM_JOBS, _claim_params("healthy", lease=30)).fetchall()
    w = worker_process(
        "--worker-id",
        "skewed",
        env=worker_env(
            LD_PRELOAD=FAKETIME_LIB,
            FAKETIME=skew,
            FAKETIME_DONT_FAKE_MONOTONIC="1",
            PGQUEUE_TEST_PAUSE_AT="after_claim",
        ),
    )
    wait_until(lambda: backends(test_dsn, "pgqueue-worker-skewed"), 20, "skewed worker")
    (fresh,) = enqueue_sql(test_dsn, 1)
    _, claimed, _token = paused_fields(w.wait_line("PAUSED after_claim", timeout=20))
    assert claimed == fresh  # never the row whose lease is live on the database clock
    row = job(test_dsn, fresh)
    now = db_now(test_dsn)
    assert abs((row["last_attempted_at"] - now).total_seconds()) < 2
    assert row["locked_until"] - row["last_attempted_at"] == dt.timedelta(seconds=LEASE)
    w.resume()
    wait_terminal(test_dsn, [fresh], timeout=10)
    row = job(test_dsn, held)
    assert (row["status"], row["locked_by"]) == ("in_progress", row_held[2])
    w.signal(signal.SIGTERM)
    assert w.wait(15) == 0
    summary(faults=1, tasks=2, duplicates=0, lost=0, note=f"worker clock {skew}")
