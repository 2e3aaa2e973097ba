"""Waiting steps cost the claim nothing, and a release reads only its own rows.

A fan-in of 10,000 parents into one step and 1,000 five-step workflows waiting on
their first step: the claim (EXPLAIN ANALYZE of the worker's own statement) reads
only due rows through the due index, never a waiting one; completing a batch of
the fan-in's parents (the worker's completion, with its release) scans no table
sequentially.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest

from django_pgqueue import sql
from django_pgqueue.db import connect
from django_pgqueue.workflows import Workflow
from testproject.demo import tasks

pytestmark = pytest.mark.django_db(transaction=True)

FAN_IN = 10_000
WAITING_WORKFLOWS = 1_000
LIMIT = 10
#: When the waiting workflows' roots are due: never, during the test.
LATER = dt.datetime(2999, 1, 1, tzinfo=dt.UTC)


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", []):
        out += _nodes(child)
    return out


@pytest.fixture
def waiting_world():
    fan_in = Workflow("fan-in")
    parents = [fan_in.add(tasks.add, i, 0, step_name=f"p{i}") for i in range(FAN_IN)]
    sink = fan_in.add(tasks.add_parents, after=parents, step_name="sink")
    fan_in.enqueue()
    for n in range(WAITING_WORKFLOWS):
        wf = Workflow(f"waiting-{n}")
        # The root runs far in the future: the rest of the workflow waits on it.
        a = wf.add(tasks.add.using(run_after=LATER), 1, 1)
        b = wf.add(tasks.add, 1, 1, after=[a])
        c = wf.add(tasks.add, 1, 1, after=[a])
        d = wf.add(tasks.add, 1, 1, after=[b, c])
        wf.add(tasks.add, 1, 1, after=[d])
        wf.enqueue()
    with connect("plan-test", prepare=True) as conn:
        conn.execute("ANALYZE pgqueue_job")
        conn.execute("ANALYZE pgqueue_workflow_edge")
    return sink


def _claim_params() -> dict[str, Any]:
    return {
        "all_queues": True,
        "queues": [],
        "limit": LIMIT,
        "lease": 30.0,
        "worker_id": "plan-test",
        "floor": None,
    }


def test_waiting_steps_cost_the_claim_and_the_release_nothing(waiting_world):
    # One test, one world: building it is most of the time.
    _the_claim_reads_due_rows_only()
    _a_release_scans_nothing_sequentially(waiting_world)


def _the_claim_reads_due_rows_only():
    with connect("plan-test", prepare=True) as conn, conn.transaction(force_rollback=True):
        waiting = conn.execute("SELECT count(*) FROM pgqueue_job WHERE status = 'waiting'")
        assert waiting.fetchone()[0] == 1 + 4 * WAITING_WORKFLOWS
        raw = conn.execute(
            "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + sql.CLAIM_JOBS, _claim_params()
        ).fetchone()[0]
        plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
        scans = [
            n
            for n in _nodes(plan)
            if n.get("Relation Name") == "pgqueue_job" and n.get("Actual Loops", 0) > 0
        ]
        assert all(n["Node Type"] != "Seq Scan" for n in scans), scans
        indexes = {n.get("Index Name") for n in scans}
        assert "pgq_job_waiting_idx" not in indexes and "pgq_job_step_idx" not in indexes
        # What it read of the due index is the rows it took (plus lapsed: none).
        due = [n for n in scans if n.get("Index Name") == "pgq_job_due_idx"]
        assert due and sum(n["Actual Rows"] for n in due) <= LIMIT, due


def _a_release_scans_nothing_sequentially(waiting_world):
    sink = waiting_world
    query = (
        "SELECT coalesce(sum(seq_scan), 0) FROM pg_stat_xact_user_tables"
        " WHERE relname IN ('pgqueue_job', 'pgqueue_workflow_edge')"
    )
    with connect("plan-test", prepare=True) as conn:
        for _ in range(3):  # a few batches, prepared as the worker's are
            with conn.transaction():
                before = conn.execute(query).fetchone()[0]
                claimed = conn.execute(sql.CLAIM_JOBS, _claim_params()).fetchall()
                assert len(claimed) == LIMIT
                ids = [row[0] for row in claimed]
                tokens = [row[2] for row in claimed]
                done = conn.execute(
                    sql.COMPLETE_JOBS,
                    {
                        "ids": ids,
                        "tokens": tokens,
                        "statuses": ["succeeded"] * LIMIT,
                        "results": ["1"] * LIMIT,
                        "delays": [0.0] * LIMIT,
                        "errors": [None] * LIMIT,
                        "last_errors": [None] * LIMIT,
                        "refunds": [0] * LIMIT,
                        "channel": f"plan-{uuid.uuid4().hex[:6]}",
                    },
                ).fetchall()
                assert len(done) == LIMIT
                assert conn.execute(query).fetchone()[0] == before
        row = conn.execute(
            "SELECT status, pending_parents FROM pgqueue_job WHERE id = %s", [sink.id]
        ).fetchone()
    assert row == ("waiting", FAN_IN - 3 * LIMIT)
