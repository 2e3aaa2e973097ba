"""A Hypothesis state machine of the queue against the real database (catalogue M1).

Rules drive the worker's own statements (claim, guarded completion, lease expiry)
and the operator functions (replay, cancel) in random orders, with crashes (a worker
forgets its tokens) and disconnects (a completion whose connection dies before
COMMIT). After every step the database must agree with a small in-memory model.

CI runs ``max_examples=50, stateful_step_count=40``; set
``PGQUEUE_HYPOTHESIS_PROFILE=deep`` for a longer search.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from django_pgqueue import operations, sql
from django_pgqueue.db import connect
from django_pgqueue.jobs.store import NewJobs

from ..conftest import database_url

pytestmark = [pytest.mark.fault, pytest.mark.timeout(300), pytest.mark.django_db(transaction=True)]

settings.register_profile(
    "ci",
    max_examples=50,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "deep",
    max_examples=500,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

WORKERS = ("A", "B", "C")
LEASE = 30.0


@dataclass
class Row:
    status: str
    attempts: int
    max_attempts: int
    token: uuid.UUID | None = None
    lapsed: bool = False


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.conn = connect("m1")
        self.conn.execute("DELETE FROM pgqueue_job")
        self.model: dict[int, Row] = {}
        self.held: dict[str, dict[int, uuid.UUID]] = {w: {} for w in WORKERS}
        self.stale_writes = 0

    # -- helpers ---------------------------------------------------------------------
    def _claimable(self) -> set[int]:
        return {
            i
            for i, r in self.model.items()
            if r.status in ("pending", "failed") or (r.status == "in_progress" and r.lapsed)
        }

    def _pick(self, worker: str, pick: int) -> tuple[int, uuid.UUID] | None:
        items = sorted(self.held[worker].items())
        return items[pick % len(items)] if items else None

    def _write(self, job_id: int, token: uuid.UUID, status: str) -> bool:
        rows = self.conn.execute(
            sql.COMPLETE_JOBS,
            {
                "ids": [job_id],
                "tokens": [token],
                "statuses": [status],
                "results": ["null"],
                "delays": [0.0],
                "errors": [json.dumps({"attempt": 0}) if status != "succeeded" else None],
                "last_errors": [None],
                "refunds": [0],
                "channel": "pgqueue_test",  # where released workflow steps are announced
            },
        ).fetchall()
        return bool(rows)

    # -- rules -----------------------------------------------------------------------
    @rule(max_attempts=st.integers(1, 3))
    def enqueue(self, max_attempts: int) -> None:
        new = NewJobs(
            priority=0,
            max_attempts=max_attempts,
            run_after=None,
            task_path="testproject.demo.tasks.noop",
            queue_name="default",
            backend="default",
        )
        row = self.conn.execute(sql.INSERT_JOB, new.values("[]", "{}")).fetchone()
        self.model[row[0]] = Row("pending", 0, max_attempts)

    @rule(worker=st.sampled_from(WORKERS), limit=st.integers(1, 3))
    def claim(self, worker: str, limit: int) -> None:
        claimable = self._claimable()
        rows = self.conn.execute(
            sql.CLAIM_JOBS,
            {
                "all_queues": True,
                "queues": [],
                "limit": limit,
                "lease": LEASE,
                "worker_id": worker,
                "floor": None,
            },
        ).fetchall()
        assert len(rows) == min(limit, len(claimable)), (rows, claimable)
        for job_id, status, token, attempts, *_ in rows:
            assert job_id in claimable
            row = self.model[job_id]
            if status == "dead":  # a lapsed lease on its last attempt
                assert row.lapsed and row.attempts >= row.max_attempts
                row.status, row.lapsed = "dead", False
                continue
            assert attempts == row.attempts + 1 and token != row.token
            row.status, row.attempts, row.token, row.lapsed = "in_progress", attempts, token, False
            self.held[worker][job_id] = token

    def _finish(self, worker: str, pick: int, outcome: str) -> None:
        chosen = self._pick(worker, pick)
        if chosen is None:
            return
        job_id, token = chosen
        del self.held[worker][job_id]
        row = self.model[job_id]
        status = outcome
        if outcome == "failed" and row.attempts >= row.max_attempts:
            status = "dead"
        expected = row.status == "in_progress" and row.token == token
        assert self._write(job_id, token, status) == expected
        if expected:
            row.status, row.lapsed = status, False
        else:
            self.stale_writes += 1

    @rule(worker=st.sampled_from(WORKERS), pick=st.integers(0, 100))
    def complete(self, worker: str, pick: int) -> None:
        self._finish(worker, pick, "succeeded")

    @rule(worker=st.sampled_from(WORKERS), pick=st.integers(0, 100))
    def fail(self, worker: str, pick: int) -> None:
        self._finish(worker, pick, "failed")

    @rule(worker=st.sampled_from(WORKERS))
    def crash(self, worker: str) -> None:
        self.held[worker] = {}  # the process died: its tokens are gone, its rows stay leased

    @rule(worker=st.sampled_from(WORKERS), pick=st.integers(0, 100))
    def disconnect(self, worker: str, pick: int) -> None:
        """The completion's connection dies before COMMIT: nothing changes."""
        chosen = self._pick(worker, pick)
        if chosen is None:
            return
        job_id, token = chosen
        conn = psycopg.connect(database_url(), connect_timeout=5)
        conn.execute(
            sql.COMPLETE_JOBS,
            {
                "ids": [job_id],
                "tokens": [token],
                "statuses": ["succeeded"],
                "results": ["1"],
                "delays": [0.0],
                "errors": [None],
                "last_errors": [None],
                "refunds": [0],
                "channel": "pgqueue_test",  # where released workflow steps are announced
            },
        )
        conn.close()  # no COMMIT: the server rolls back

    @rule()
    def expire_leases(self) -> None:
        self.conn.execute(
            "UPDATE pgqueue_job SET locked_until = now() - interval '1 second'"
            " WHERE status = 'in_progress'"
        )
        for row in self.model.values():
            if row.status == "in_progress":
                row.lapsed = True

    @rule(pick=st.integers(0, 100))
    def replay(self, pick: int) -> None:
        from django_pgqueue.models import Job

        candidates = sorted(
            i
            for i, r in self.model.items()
            if r.status in ("succeeded", "dead", "cancelled", "failed")
        )
        if not candidates:
            return
        job_id = candidates[pick % len(candidates)]
        result = operations.replay(Job, [job_id])
        assert set(result.changed) == {job_id}
        row = self.model[job_id]
        row.status, row.attempts, row.lapsed = "pending", 0, False

    @rule(pick=st.integers(0, 100))
    def cancel(self, pick: int) -> None:
        from django_pgqueue.models import Job

        ids = sorted(self.model)
        if not ids:
            return
        job_id = ids[pick % len(ids)]
        result = operations.cancel(Job, [job_id])
        row = self.model[job_id]
        if row.status in ("pending", "failed"):
            assert set(result.changed) == {job_id}
            row.status = "cancelled"
        else:
            assert not result.changed  # never a held or finished row

    # -- invariants ------------------------------------------------------------------
    @invariant()
    def database_matches_model(self) -> None:
        rows = self.conn.execute(
            "SELECT id, status, attempts, max_attempts, locked_by, locked_until IS NOT NULL"
            " FROM pgqueue_job"
        ).fetchall()
        assert len(rows) == len(self.model)
        for job_id, status, attempts, max_attempts, locked_by, leased in rows:
            row = self.model[job_id]
            assert (status, attempts) == (row.status, row.attempts), (job_id, status, row)
            assert attempts <= max_attempts
            assert leased == (status == "in_progress")
            if status == "in_progress":
                assert locked_by == row.token  # exactly one live claim token

    def teardown(self) -> None:
        try:
            # Final drain without faults: every job ends succeeded, dead or cancelled.
            for _ in range(20):
                self.expire_leases()
                rows = self.conn.execute(
                    sql.CLAIM_JOBS,
                    {
                        "all_queues": True,
                        "queues": [],
                        "limit": 1000,
                        "lease": LEASE,
                        "worker_id": "drain",
                        "floor": None,
                    },
                ).fetchall()
                if not rows:
                    break
                for job_id, status, token, *_ in rows:
                    if status != "dead":
                        assert self._write(job_id, token, "succeeded")
            (open_rows,) = self.conn.execute(
                "SELECT count(*) FROM pgqueue_job"
                " WHERE status NOT IN ('succeeded', 'dead', 'cancelled')"
            ).fetchone()
            assert open_rows == 0
        finally:
            self.conn.close()


def test_queue_state_machine():
    profile = os.environ.get("PGQUEUE_HYPOTHESIS_PROFILE", "ci")
    run_state_machine_as_test(QueueMachine, settings=settings.get_profile(profile))
