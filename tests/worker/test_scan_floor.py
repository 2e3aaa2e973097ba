"""The claim's scan floor: claims stay cheap while a session holds back the xmin
horizon, and a row below the floor still goes at the next full claim.

A pinned snapshot keeps every claimed job's pending version (in the due index) and
running version (in the lease index) from vacuum; without a floor each claim fetches
the heap tuple of every one of them (sql/jobs.py, "The scan floor").
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import ClientCursor

from django_pgqueue import sql
from django_pgqueue.db import connect
from django_pgqueue.jobs import store

CHURNED = 4000

NEW_JOBS = f"""INSERT INTO {sql.JOB_TABLE} (
    status, priority, attempts, max_attempts, next_attempt_at, worker_id, last_error,
    errors, created_at, updated_at, task_path, queue_name, backend, args, kwargs,
    worker_ids, locked_by, locked_until
) SELECT 'pending', 0, 0, 3, now() - make_interval(secs => %(age)s), '', '', '[]', now(),
         now(), 'tests.tasks.noop', 'default', 'default', '[]', '{{}}', '[]', NULL, NULL
FROM generate_series(1, %(n)s)
RETURNING id"""


@pytest.fixture
def conn(transactional_db: None) -> Iterator[psycopg.Connection]:
    with connect("floor-test", prepare=True) as conn:
        yield conn


def params(limit: int = 10, floors: store.ScanFloor | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "all_queues": True,
        "queues": [],
        "limit": limit,
        "lease": 60.0,
        "worker_id": "floor-test",
    }
    if floors is not None:
        out["scan_floor"] = floors
    return out


def churn(conn: psycopg.Connection, n: int) -> None:
    """Jobs enqueued, claimed and finished as a drain leaves them: a dead pending
    version in the due index and a dead running one, its lease long lapsed, in the
    lease index, for each."""
    conn.execute(NEW_JOBS, {"age": 120, "n": n})
    conn.execute(
        f"""UPDATE {sql.JOB_TABLE} SET status = 'in_progress', attempts = 1,
            locked_by = gen_random_uuid(), locked_until = now() - interval '60 seconds'
            WHERE status = 'pending'"""
    )
    conn.execute(
        f"""UPDATE {sql.JOB_TABLE} SET status = 'succeeded', locked_until = NULL,
            finished_at = now() WHERE status = 'in_progress'"""
    )


def buffers(conn: psycopg.Connection, statement: str, floor: float | None) -> int:
    """Shared buffers the execution of ``statement`` touches, by EXPLAIN (ANALYZE)."""
    with ClientCursor(conn) as cur:
        cur.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement,
            {**params(), "floor": floor, "channel": "pgqueue"},
        )
        (plan,) = cur.fetchone()
    if isinstance(plan, str):
        plan = json.loads(plan)
    top = plan[0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])


# END_LAPSED_STEPS takes the floor too, but the planner may read it through the step
# index (rows with a workflow), which holds none of these rows: not measured here.
@pytest.mark.parametrize(
    "statement", [sql.CLAIM_JOBS, sql.CLAIM_ATOMIC_JOBS], ids=["claim", "claim_atomic"]
)
def test_a_pinned_horizon_does_not_make_a_floored_scan_read_the_dead_head(conn, statement):
    conn.execute(f"ANALYZE {sql.JOB_TABLE}")
    with connect("floor-pin", prepare=False) as pin:
        pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        pin.execute(f"SELECT count(*) FROM {sql.JOB_TABLE}").fetchone()
        churn(conn, CHURNED)
        conn.execute(f"VACUUM {sql.JOB_TABLE}")  # removes nothing the pin can see
        dead = conn.execute(
            "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = %s", [sql.JOB_TABLE]
        ).fetchone()[0]
        full = min(buffers(conn, statement, None) for _ in range(2))
        floored = min(buffers(conn, statement, 2.0) for _ in range(2))
        pin.execute("ROLLBACK")
    assert dead >= CHURNED
    # Without the floor: the heap pages of the dead versions, through the indexes
    # (the plain claim reads the due and the lease index, the atomic one the lease's:
    # these jobs are not atomic).
    assert full > CHURNED / 50, full
    assert floored * 5 < full, (floored, full)  # measured for the claim: 23 against 193


def test_a_row_below_the_floor_goes_at_the_next_full_claim(conn, monkeypatch):
    monkeypatch.setattr(store.ScanFloor, "FULL_EVERY", 0.5)
    monkeypatch.setattr(store.ScanFloor, "FULL_SHARE", 1.0)
    floors = store.ScanFloor()
    assert store.claim(conn, params(floors=floors)) == []  # full, and short: caught up
    (old,) = conn.execute(NEW_JOBS, {"age": 30, "n": 1}).fetchone()
    (new,) = conn.execute(NEW_JOBS, {"age": 0, "n": 1}).fetchone()
    (lapsed,) = conn.execute(NEW_JOBS, {"age": 60, "n": 1}).fetchone()
    conn.execute(
        f"""UPDATE {sql.JOB_TABLE} SET status = 'in_progress', attempts = 1,
            locked_by = gen_random_uuid(), locked_until = now() - interval '30 seconds'
            WHERE id = %s""",
        [lapsed],
    )

    # Between full claims: only what became due (or lapsed) since the last one.
    assert [j.id for j in store.claim(conn, params(floors=floors))] == [new]

    # The next full claim takes the rest: a row below the floor waits, never lost.
    time.sleep(0.5)
    assert sorted(j.id for j in store.claim(conn, params(floors=floors))) == sorted([old, lapsed])
    counts = dict(
        conn.execute(f"SELECT status, count(*) FROM {sql.JOB_TABLE} GROUP BY status").fetchall()
    )
    assert counts == {"in_progress": 3}


def test_a_full_claim_that_fills_its_limit_makes_every_claim_full_until_one_is_short():
    floors = store.ScanFloor()
    floors.record("claim", started=10.0, ended=10.001, floor=None, short=True)
    assert floors.age("claim", 10.5) == pytest.approx(0.5 + store.ScanFloor.MARGIN)
    floors.record("claim", started=10.5, ended=10.501, floor=1.5, short=False)  # not full
    assert floors.age("claim", 10.9) == pytest.approx(0.9 + store.ScanFloor.MARGIN)
    assert floors.age("claim", 11.0) is None  # a full claim is due
    assert floors.age("other", 10.5) is None  # each statement has its own
    # The full claim at 11.0 filled its limit: a backlog, maybe below the floor
    # (a long transaction's bulk enqueue). Every claim is full until one is short.
    floors.record("claim", started=11.0, ended=11.001, floor=None, short=False)
    assert floors.age("claim", 11.1) is None
    floors.record("claim", started=11.1, ended=11.101, floor=None, short=True)
    assert floors.age("claim", 11.2) == pytest.approx(0.1 + store.ScanFloor.MARGIN)


def test_slow_full_claims_are_spaced_out():
    floors = store.ScanFloor()
    # A full claim of 8 ms (a held horizon): the next full claim 8 s later.
    floors.record("claim", started=0.0, ended=0.008, floor=None, short=True)
    assert floors.age("claim", 7.9) is not None
    assert floors.age("claim", 8.0) is None
    # Never more than FULL_EVERY_MAX apart.
    floors.record("claim", started=10.0, ended=11.0, floor=None, short=True)
    assert floors.age("claim", 10.0 + store.ScanFloor.FULL_EVERY_MAX) is None


def test_while_full_claims_are_spaced_out_short_floored_claims_trail_the_floor():
    """Under a held horizon full claims come seconds apart; a floored claim that took
    every row it could see raises the floor to TRAIL below its start, so floored
    claims read seconds of dead entries, not everything since the last full claim."""
    trail, margin = store.ScanFloor.TRAIL, store.ScanFloor.MARGIN
    floors = store.ScanFloor()
    # A full claim of 100 ms: the next one FULL_EVERY_MAX later.
    floors.record("claim", started=0.0, ended=0.1, floor=None, short=True)
    assert floors.age("claim", 20.0) == pytest.approx(20.0 + margin)
    # A short floored claim at 20 s: the floor follows it, TRAIL behind.
    floors.record("claim", started=20.0, ended=20.001, floor=20.0 + margin, short=True)
    assert floors.age("claim", 20.5) == pytest.approx(0.5 + trail + margin)
    # One that filled its limit proves nothing: the floor stays.
    floors.record("claim", started=25.0, ended=25.001, floor=5.0 + trail + margin, short=False)
    assert floors.age("claim", 25.5) == pytest.approx(5.5 + trail + margin)
    # The floor never moves down, and the full claims keep their time.
    floors.record("claim", started=19.0, ended=19.001, floor=1.0, short=True)
    assert floors.age("claim", 25.5) == pytest.approx(5.5 + trail + margin)
    assert floors.age("claim", store.ScanFloor.FULL_EVERY_MAX) is None
    # A full claim every second: the floor is the full claims' own, as before.
    floors = store.ScanFloor()
    floors.record("claim", started=0.0, ended=0.001, floor=None, short=True)
    floors.record("claim", started=0.9, ended=0.901, floor=0.9 + margin, short=True)
    assert floors.age("claim", 0.95) == pytest.approx(0.95 + margin)


def test_a_backlog_below_the_floor_drains_at_full_speed_once_found(conn, monkeypatch):
    """A long transaction's bulk enqueue lands below the floor: the next full claim
    finds it, and every claim after it is full until the backlog is gone."""
    monkeypatch.setattr(store.ScanFloor, "FULL_EVERY", 0.5)
    monkeypatch.setattr(store.ScanFloor, "FULL_SHARE", 1.0)
    floors = store.ScanFloor()
    assert store.claim(conn, params(floors=floors)) == []
    conn.execute(NEW_JOBS, {"age": 30, "n": 25})
    assert store.claim(conn, params(floors=floors)) == []  # below the floor
    time.sleep(0.5)
    taken = [len(store.claim(conn, params(floors=floors))) for _ in range(4)]
    assert taken == [10, 10, 5, 0]
