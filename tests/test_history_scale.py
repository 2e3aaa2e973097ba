"""The history at scale: retention of a million finished jobs, and a claim whose plan
and cost do not change with the size of the history.

Slow (a million rows are written), so run in the serial pass.
"""

from __future__ import annotations

import datetime as dt
import json
import time

import psycopg
import pytest

from django_pgqueue import history, sql
from django_pgqueue.db import connect
from django_pgqueue.maintenance import make_partitions, prune

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("clean_history"),
]

MILLION = 1_000_000

# Finished jobs written straight into one day partition of the history: the shape the
# mover leaves, without running a million jobs.
FILL = """
INSERT INTO pgqueue_job_history (
    id, status, priority, attempts, max_attempts, next_attempt_at, worker_id, last_error,
    errors, created_at, finished_at, updated_at, task_path, queue_name, backend, args,
    kwargs, result, worker_ids, atomic)
SELECT i, 'succeeded', 0, 1, 5, %(at)s, 'w', '', '[]', %(at)s, %(at)s, %(at)s,
       'testproject.demo.tasks.add', 'default', 'default', '[1, 2]', '{}', '3', '["w"]', false
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i
"""


def fill_history(conn: psycopg.Connection, rows: int, at: dt.datetime, first: int = 1) -> None:
    history.create_partition(conn, "succeeded", at.date())
    conn.execute(FILL, {"at": at, "first": first, "last": first + rows - 1})
    conn.execute("ANALYZE pgqueue_job_history")


def wal_lsn(conn: psycopg.Connection) -> str:
    return conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]


def test_retention_of_a_million_finished_jobs_writes_almost_no_wal():
    """Measured on main: 5.95 s and 234 MB of WAL to prune 1,000,000 succeeded jobs
    row by row. Dropping their partition writes a few kB, whatever the row count."""
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
    with connect("test-fill") as conn:
        fill_history(conn, MILLION, old)
        make_partitions(conn)  # the days ahead, as a worker has them made: not retention
        conn.execute("CHECKPOINT")  # full-page writes of the fill are not the prune's
        before = wal_lsn(conn)
        started = time.perf_counter()
        report = prune()
        seconds = time.perf_counter() - started
        after = wal_lsn(conn)
        wal = conn.execute("SELECT pg_wal_lsn_diff(%s, %s)", (after, before)).fetchone()[0]
        (left,) = conn.execute("SELECT count(*) FROM pgqueue_job_history").fetchone()
    print(f"\nretention of {MILLION} rows: {seconds:.3f} s, {int(wal)} bytes of WAL")
    assert left == 0
    assert report.deleted[sql.HISTORY_TABLE]["succeeded"] >= MILLION * 0.9  # reltuples
    assert wal < 1024 * 1024


def _claim_cost(conn: psycopg.Connection) -> tuple[list[str], int]:
    """The claim's plan (node types and relations) and the buffers it touched, run
    under EXPLAIN ANALYZE and rolled back."""
    params = {
        "all_queues": True,
        "queues": [],
        "limit": 10,
        "lease": 30.0,
        "worker_id": "w",
        "floor": None,
    }
    with conn.transaction(force_rollback=True):
        (plan,) = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql.CLAIM_JOBS, params
        ).fetchone()
    nodes: list[str] = []

    def walk(node: dict) -> None:
        nodes.append(f"{node['Node Type']}:{node.get('Relation Name', '')}")
        for child in node.get("Plans", []):
            walk(child)

    root = (plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]
    walk(root)
    return nodes, root["Shared Hit Blocks"] + root["Shared Read Blocks"]


def test_claim_plan_stays_flat_with_a_large_history():
    """The claim reads the live table only: its plan and the buffers it touches are the
    same with an empty history and with a million finished jobs in it (10M measured
    by hand: docs/performance.md)."""
    from django_pgqueue.models import Job

    Job.objects.bulk_create(Job(task_path="testproject.demo.tasks.add") for _ in range(2000))
    with connect("test-plan", prepare=False) as conn:
        conn.execute("ANALYZE pgqueue_job")
        empty_nodes, empty_buffers = _claim_cost(conn)
        fill_history(conn, MILLION, dt.datetime.now(dt.UTC) - dt.timedelta(days=1))
        full_nodes, full_buffers = _claim_cost(conn)
    print(f"\nclaim buffers: {empty_buffers} (empty history), {full_buffers} (1M rows)")
    assert full_nodes == empty_nodes
    assert not any(sql.HISTORY_TABLE in node for node in full_nodes)
    assert full_buffers <= empty_buffers * 1.1 + 5


def test_the_mover_reads_finished_rows_through_their_index_not_the_backlog():
    """With a large live backlog, a batch of the mover reads the index of finished
    rows, never the whole table."""
    from django_pgqueue.models import Job

    Job.objects.bulk_create(Job(task_path="testproject.demo.tasks.add") for _ in range(50_000))
    with connect("test-plan", prepare=False) as conn:
        conn.execute("ANALYZE pgqueue_job")
        with conn.transaction(force_rollback=True):
            rows = conn.execute(
                "EXPLAIN " + sql.move_jobs(history.job_columns()), {"delay": 0.0, "limit": 1000}
            ).fetchall()
    plan = "\n".join(r[0] for r in rows)
    assert "pgq_job_finished_idx" in plan, plan
    assert "Seq Scan on pgqueue_job " not in plan, plan
    # Each picked row is deleted by one primary-key lookup.
    assert "pgqueue_job_pkey" in plan, plan
