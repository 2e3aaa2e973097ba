"""Monitoring reads cost the backlog, not the history.

The dashboard, ``pgqueue_status`` and the Prometheus gauges read through
``django_pgqueue.stats``. With a million finished rows behind a small backlog, their
statements must read the backlog through the partial indexes and estimate the
terminal states, never scan the history. Asserted from plans and from the
transaction's own scan counters, never from timings.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection, transaction

from django_pgqueue import sql, stats
from django_pgqueue.status import render_text, snapshot

pytestmark = pytest.mark.django_db(transaction=True)

HISTORY = 1_000_000
BACKLOG = 200

_INSERT = """
INSERT INTO pgqueue_job (status, priority, attempts, max_attempts, next_attempt_at,
    worker_id, last_error, errors, created_at, updated_at, task_path, queue_name, backend,
    args, kwargs, worker_ids, finished_at, locked_until, locked_by)
SELECT %s, 0, 1, 3, now(), '', '', '[]', now(), now(), 'testproject.demo.tasks.add',
    CASE WHEN g %% 2 = 0 THEN 'default' ELSE 'emails' END, 'default', '[]', '{}', '[]',
    CASE WHEN %s = 'succeeded' THEN now() END,
    CASE WHEN %s = 'in_progress' THEN now() + interval '30 seconds' END,
    CASE WHEN %s = 'in_progress' THEN gen_random_uuid() END
FROM generate_series(1, %s) AS g
"""


@pytest.fixture
def big_history() -> None:
    with connection.cursor() as cursor:
        cursor.execute(_INSERT, ["succeeded"] * 4 + [HISTORY])
        cursor.execute(_INSERT, ["pending"] * 4 + [BACKLOG])
        cursor.execute(_INSERT, ["in_progress"] * 4 + [10])
        cursor.execute("ANALYZE pgqueue_job")


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", []):
        out += _nodes(child)
    return out


def _scans(statement: str) -> list[dict[str, Any]]:
    """The executed plan's nodes that read the job table (EXPLAIN ANALYZE: loops, not times)."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + statement)
        raw = cursor.fetchone()[0]
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    # A Bitmap Heap Scan names the table and its Bitmap Index Scan the index.
    return [
        n
        for n in _nodes(plan)
        if n.get("Relation Name") == "pgqueue_job"
        or str(n.get("Index Name", "")).startswith("pgq_job_")
    ]


def _seq_tuples_read(run: Any) -> int:
    query = "SELECT seq_tup_read FROM pg_stat_xact_user_tables WHERE relname = 'pgqueue_job'"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(query)
        before = cursor.fetchone()[0]
        run()
        cursor.execute(query)
        return cursor.fetchone()[0] - before


def test_the_overview_reads_only_the_partial_indexes(big_history):
    scans = _scans(sql.JOB_OVERVIEW)
    executed = [n for n in scans if n["Actual Loops"] > 0]
    assert all(n["Node Type"] != "Seq Scan" for n in executed), executed
    indexes = {n.get("Index Name") for n in executed}
    assert {"pgq_job_due_idx", "pgq_job_lease_idx"} <= indexes, indexes
    # What it read is the backlog, not the history.
    assert sum(n["Actual Rows"] for n in executed if "Relation Name" in n) <= BACKLOG + 10


def test_the_terminal_states_are_estimated(big_history):
    queues = {q.name: q for q in stats.job_queue_overview()}
    assert set(queues) == {"default", "emails"}
    for queue in queues.values():
        assert queue.estimated
        # An estimate from ANALYZE's sample: near the truth, not exact.
        assert 0.8 * HISTORY / 2 < queue.counts["succeeded"] < 1.2 * HISTORY / 2
    assert sum(q.counts["pending"] for q in queues.values()) == BACKLOG  # exact
    assert sum(q.in_flight for q in queues.values()) == 10


def test_status_and_gauges_read_no_history(big_history):
    assert _seq_tuples_read(lambda: (snapshot(), stats.delivery_overview())) == 0


def test_a_small_table_is_counted_exactly():
    with connection.cursor() as cursor:
        cursor.execute(_INSERT, ["succeeded"] * 4 + [7])
    (queue,) = [q for q in stats.job_queue_overview() if q.name == "emails"]
    assert not queue.estimated
    assert queue.counts == {"succeeded": 4}  # ids 1, 3, 5, 7


def test_the_status_text_marks_estimated_counts(big_history):
    with connection.cursor() as cursor:
        cursor.execute(_INSERT, ["dead"] * 4 + [50_000])
        cursor.execute("ANALYZE pgqueue_job")
    data = snapshot()
    assert all(q["estimated"] for q in data["queues"])
    text = render_text(data)
    assert "~" in text.split("Webhook endpoints")[0], text
