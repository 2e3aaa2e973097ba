"""Upgrading online: finished rows left in the live table (an install that ran before
the history, or with ``HISTORY_DELAY_SECONDS = None``) are filed by the mover in
batches, making the past days' partitions as it meets them, and live rows stay; the
documented way back (``history.move_back``) returns every one to the live table."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest

from django_pgqueue import history

from .support.scratch import manage, scratch_databases

pytestmark = pytest.mark.django_db(databases=[])

LIVE = ("pending", "failed", "in_progress")


# Rows written to the live table before any moved: finished ones of several past days
# (cancelled ones that never ran, without finished_at), and live ones the mover must
# not touch.
OLD_ROWS = """
INSERT INTO pgqueue_job (
    status, priority, attempts, max_attempts, next_attempt_at, worker_id, last_error,
    errors, created_at, started_at, finished_at, updated_at, task_path, queue_name, backend,
    args, kwargs, result, worker_ids, atomic, locked_by, locked_until)
SELECT s.status, 0, 1, 5, now(), 'w', '', '[]', now() - s.age, now() - s.age,
       CASE WHEN s.status = 'cancelled' THEN NULL ELSE now() - s.age END,
       now() - s.age, 'testproject.demo.tasks.add', 'default', 'default', '[1, 2]', '{}',
       CASE WHEN s.status = 'succeeded' THEN '3'::jsonb END, '["w"]', false,
       CASE WHEN s.status = 'in_progress' THEN gen_random_uuid() END,
       CASE WHEN s.status = 'in_progress' THEN now() + interval '1 hour' END
FROM generate_series(1, %(n)s) AS i,
     LATERAL (SELECT (ARRAY['succeeded', 'dead', 'cancelled', 'pending', 'failed',
                            'in_progress'])[1 + i %% 6] AS status,
                     pg_catalog.make_interval(days => i %% 20, secs => i) AS age) AS s
"""


def test_finished_rows_in_the_live_table_are_filed_in_batches_and_move_back():
    with scratch_databases("upgrade") as (url,):
        manage("migrate", "--verbosity", "0", url=url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(OLD_ROWS, {"n": 6000})
            before = dict(
                conn.execute("SELECT status, count(*) FROM pgqueue_job GROUP BY 1").fetchall()
            )
            ids_before = {r[0] for r in conn.execute("SELECT id FROM pgqueue_job")}
            assert conn.execute("SELECT count(*) FROM pgqueue_job_history").fetchone()[0] == 0

            # The mover files the old finished rows a batch at a time, making the
            # past days' partitions as it meets them.
            report = history.move_finished(conn, delay=0, batch_size=500)
            assert report.moved == before["succeeded"] + before["dead"] + before["cancelled"]
            assert report.batches >= report.moved // 500 and report.partitions_made >= 20
            live = dict(conn.execute("SELECT status, count(*) FROM pgqueue_job GROUP BY 1"))
            assert live == {s: before[s] for s in LIVE}
            moved = dict(
                conn.execute("SELECT status, count(*) FROM pgqueue_job_history GROUP BY 1")
            )
            assert moved == {s: before[s] for s in ("succeeded", "dead", "cancelled")}
            (twice,) = conn.execute(
                "SELECT count(*) FROM pgqueue_job j JOIN pgqueue_job_history h USING (id)"
            ).fetchone()
            assert twice == 0
            (cancelled_at,) = conn.execute(
                "SELECT bool_and(finished_at = updated_at) FROM pgqueue_job_history"
                " WHERE status = 'cancelled'"
            ).fetchone()
            assert cancelled_at  # filed under its last change

            # The documented way back: every history row returns to pgqueue_job.
            assert history.move_back(conn) == report.moved
            assert conn.execute("SELECT count(*) FROM pgqueue_job_history").fetchone()[0] == 0
            after = dict(conn.execute("SELECT status, count(*) FROM pgqueue_job GROUP BY 1"))
            assert after == before
            assert {r[0] for r in conn.execute("SELECT id FROM pgqueue_job")} == ids_before
            # A job enqueued afterwards gets an id of its own.
            (new_id,) = conn.execute(
                "INSERT INTO pgqueue_job (status, priority, attempts, max_attempts,"
                " next_attempt_at, worker_id, last_error, errors, created_at, updated_at,"
                " task_path, queue_name, backend, args, kwargs, worker_ids)"
                " VALUES ('pending', 0, 0, 5, now(), '', '', '[]', now(), now(),"
                " 'testproject.demo.tasks.add', 'default', 'default', '[]', '{}', '[]')"
                " RETURNING id"
            ).fetchone()
            assert new_id not in ids_before


def test_day_partitions_are_named_by_utc_day():
    assert (
        history.partition_name("dead", dt.date(2026, 1, 2)) == "pgqueue_job_history_dead_p20260102"
    )
