"""Upgrading online: a database filled by the previous schema (0017) migrates to the
history (0022 creates the table, moves nothing), then the mover files the old
finished rows in batches; and the documented rollback brings them back."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys

import psycopg
import pytest
from django.db import connection
from psycopg import sql as pgsql

from django_pgqueue import history
from django_pgqueue.db import connection_params

from .conftest import REPO, database_url

pytestmark = pytest.mark.django_db(databases=[])

LIVE = ("pending", "failed", "in_progress")


def manage(*args: str, url: str) -> str:
    env = {
        k: v for k, v in os.environ.items() if k not in ("QUEUE_DATABASE_URL", "PGQUEUE_DATABASE")
    }
    env.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="testproject.settings")
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


# Rows as release 0017 wrote them: finished ones of several past days (one that never
# ran, without finished_at), and live ones the upgrade must not touch.
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


def test_a_database_of_the_previous_release_migrates_then_moves_and_rolls_back():
    name = f"{connection.settings_dict['NAME']}_upgrade"
    url = database_url().replace(f"/{connection.settings_dict['NAME']}", f"/{name}", 1)
    admin = {**connection_params("default"), "dbname": "postgres"}
    ident = pgsql.Identifier(name)
    with psycopg.connect(autocommit=True, **admin) as conn:
        conn.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
        conn.execute(pgsql.SQL("CREATE DATABASE {}").format(ident))
    try:
        manage("migrate", "--verbosity", "0", url=url)
        manage("migrate", "django_pgqueue", "0017", "--verbosity", "0", url=url)
        with psycopg.connect(autocommit=True, **{**admin, "dbname": name}) as conn:
            assert conn.execute("SELECT to_regclass('pgqueue_job_history')").fetchone() == (None,)
            conn.execute(OLD_ROWS, {"n": 6000})
            before = dict(
                conn.execute("SELECT status, count(*) FROM pgqueue_job GROUP BY 1").fetchall()
            )
            ids_before = {r[0] for r in conn.execute("SELECT id FROM pgqueue_job")}

        manage("migrate", "--verbosity", "0", url=url)
        with psycopg.connect(autocommit=True, **{**admin, "dbname": name}) as conn:
            # The migration moved nothing.
            assert conn.execute("SELECT count(*) FROM pgqueue_job").fetchone()[0] == 6000
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

        # The documented rollback: every history row returns to pgqueue_job.
        manage("migrate", "django_pgqueue", "0017", "--verbosity", "0", url=url)
        with psycopg.connect(autocommit=True, **{**admin, "dbname": name}) as conn:
            assert conn.execute("SELECT to_regclass('pgqueue_job_history')").fetchone() == (None,)
            after = dict(conn.execute("SELECT status, count(*) FROM pgqueue_job GROUP BY 1"))
            assert after == before
            assert {r[0] for r in conn.execute("SELECT id FROM pgqueue_job")} == ids_before
    finally:
        with psycopg.connect(autocommit=True, **admin) as conn:
            conn.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))


def test_day_partitions_are_named_by_utc_day():
    assert (
        history.partition_name("dead", dt.date(2026, 1, 2)) == "pgqueue_job_history_dead_p20260102"
    )
