"""The worker's statements stay index lookups when the table grows after their plan.

A plan made while the queue table was empty (and analysed as empty) must not be
reused once it holds rows: a generic plan of a join with ``unnest(ids)`` is then a
Seq Scan of the whole table per statement. Each test runs the worker's own code, on
a connection opened as the worker opens its own, enough times on an empty analysed
table for PostgreSQL to settle on a generic plan if it would, grows the table to
20,000 rows, runs the same code again and asserts, from the transaction's own scan
counters, that no statement read the table sequentially.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from django_pgqueue import sql
from django_pgqueue.db import connect
from django_pgqueue.jobs import store
from django_pgqueue.outcomes import DeliveryOutcome, JobOutcome
from django_pgqueue.worker.atomic import AtomicJobSource
from django_pgqueue.worker.runner import TaskRunner
from django_pgqueue.worker.sources import JobSource

ROWS = 20_000
NOBODY = uuid.UUID(int=0)
#: Runs on the empty table: psycopg prepares from the second, PostgreSQL (in its
#: default ``plan_cache_mode``) switches to a generic plan after five custom ones.
WARM_UP = 8


@pytest.fixture
def conn(transactional_db: None) -> Iterator[psycopg.Connection]:
    """A connection opened as the worker opens its own (prepared statements on)."""
    with connect("plan-test", prepare=True) as conn:
        yield conn


def seq_scans(conn: psycopg.Connection, table: str, run: Callable[[], Any]) -> int:
    """Sequential scans of ``table`` done by ``run()``, counted inside one transaction."""
    with conn.transaction():
        before = conn.execute(
            "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = %s", [table]
        ).fetchone()
        run()
        after = conn.execute(
            "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = %s", [table]
        ).fetchone()
    return int(after[0]) - int(before[0]) if before else int(after[0])


def rows_read_by_seq_scans(conn: psycopg.Connection, table: str, run: Callable[[], Any]) -> int:
    """Rows of ``table`` that sequential scans read during ``run()`` (one transaction)."""
    query = "SELECT seq_tup_read FROM pg_stat_xact_user_tables WHERE relname = %s"
    with conn.transaction():
        before = conn.execute(query, [table]).fetchone()
        run()
        after = conn.execute(query, [table]).fetchone()
    return int(after[0]) - int(before[0]) if before else int(after[0])


def grow(conn: psycopg.Connection, statement: str, table: str) -> None:
    """Analyse ``table`` empty, warm the plans (``run`` is called by the caller), then fill it."""
    conn.execute(statement, {"n": ROWS})
    assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == ROWS


def warm_then_grow(
    conn: psycopg.Connection, work: Callable[[], Any], fill: str, table: str
) -> None:
    """Run ``work`` on ``table`` analysed empty until a generic plan could be chosen; fill it."""
    conn.execute(f"ANALYZE {table}")
    for _ in range(WARM_UP):
        work()
    grow(conn, fill, table)


FILL_JOBS = f"""INSERT INTO {sql.JOB_TABLE} (
    status, priority, attempts, max_attempts, next_attempt_at, worker_id, last_error,
    errors, created_at, updated_at, task_path, queue_name, backend, args, kwargs,
    worker_ids, locked_by, locked_until
) SELECT 'in_progress', 0, 1, 3, now(), 'w', '', '[]', now(), now(), 'tests.tasks.noop',
         'default', 'default', '[]', '{{}}', '[]', gen_random_uuid(), now() + interval '1 hour'
FROM generate_series(1, %(n)s)"""


@pytest.mark.parametrize("step", [True, False], ids=["with-release", "plain"])
def test_job_completion_and_lease_extension_do_not_scan_a_grown_table(conn, step):
    """Both completions: with the workflow release, and the plain one a batch of
    jobs that are not steps takes (``COMPLETE_PLAIN_COUNTED_JOBS``)."""
    source = JobSource(TaskRunner("plan-test", 60.0))
    miss = JobOutcome(id=1, token=NOBODY, status="succeeded", result_json="null", step=step)

    def work() -> None:
        source.write_outcomes(conn, [miss])
        source.extend_leases(conn, [1], [NOBODY], 60.0)
        source.read_outcomes(conn, [1])

    conn.execute(f"ANALYZE {sql.JOB_TABLE}")
    for _ in range(WARM_UP):  # prepared from the second run on, if it were
        work()
    grow(conn, FILL_JOBS, sql.JOB_TABLE)
    held = conn.execute(f"SELECT id, locked_by FROM {sql.JOB_TABLE} LIMIT 1").fetchone()

    assert seq_scans(conn, sql.JOB_TABLE, work) == 0
    hit = JobOutcome(id=held[0], token=held[1], status="succeeded", result_json="null", step=step)
    assert seq_scans(conn, sql.JOB_TABLE, lambda: source.write_outcomes(conn, [hit])) == 0
    assert conn.execute(
        f"SELECT status FROM {sql.JOB_TABLE} WHERE id = %s", [held[0]]
    ).fetchone() == ("succeeded",)


def test_job_claim_does_not_scan_a_grown_table(conn):
    source = JobSource(TaskRunner("plan-test", 60.0))
    params = {"all_queues": True, "queues": [], "limit": 10, "lease": 60.0, "worker_id": "t"}
    conn.execute(f"ANALYZE {sql.JOB_TABLE}")
    for _ in range(WARM_UP):
        assert source.claim(conn, params) == []
    grow(
        conn,
        FILL_JOBS.replace("'in_progress'", "'pending'").replace(
            "gen_random_uuid(), now() + interval '1 hour'", "NULL, NULL"
        ),
        sql.JOB_TABLE,
    )

    claimed: list[Any] = []
    assert seq_scans(conn, sql.JOB_TABLE, lambda: claimed.extend(source.claim(conn, params))) == 0
    assert len(claimed) == 10


def test_ending_lapsed_steps_does_not_scan_a_grown_table(conn):
    # Run before a claim once a second (jobs/store.py): with no step lapsed it reads
    # one entry of the lease index, whatever the table holds.
    params = {"all_queues": True, "queues": [], "limit": 10, "lease": 60.0, "worker_id": "t"}
    warm_then_grow(conn, lambda: store.end_lapsed_steps(conn, params), FILL_JOBS, sql.JOB_TABLE)
    ended: list[Any] = []
    assert (
        seq_scans(conn, sql.JOB_TABLE, lambda: ended.extend(store.end_lapsed_steps(conn, params)))
        == 0
    )
    assert ended == []


def test_atomic_claim_does_not_scan_a_grown_table(conn):
    source = AtomicJobSource("plan-test")
    params = {"all_queues": True, "queues": [], "limit": 10, "lease": 60.0, "worker_id": "t"}
    conn.execute(f"ANALYZE {sql.JOB_TABLE}")
    for _ in range(WARM_UP):
        assert source.claim(conn, params) == []
        assert not source.any_due(conn, params)
    # Due and held rows of the other kind: the atomic claim takes none of them.
    grow(conn, FILL_JOBS, sql.JOB_TABLE)
    conn.execute(
        f"UPDATE {sql.JOB_TABLE} SET locked_until = now() - interval '1 second' WHERE id % 2 = 0"
    )

    assert seq_scans(conn, sql.JOB_TABLE, lambda: source.claim(conn, params)) == 0
    assert seq_scans(conn, sql.JOB_TABLE, lambda: source.any_due(conn, params)) == 0


FILL_DELIVERIES = f"""WITH ev AS (
    INSERT INTO {sql.EVENT_TABLE} (event_type, payload, body, msg_id, created_at)
    SELECT 'e', '{{}}', '{{}}', 'msg_' || g, now() FROM generate_series(1, %(n)s) AS g
    RETURNING id
)
INSERT INTO {sql.DELIVERY_TABLE} (
    status, attempts, max_attempts, next_attempt_at, worker_id, last_error,
    created_at, updated_at, endpoint_id, event_id, locked_by, locked_until
) SELECT 'in_progress', 1, 3, now(), 'w', '', now(), now(),
         (SELECT max(id) FROM {sql.ENDPOINT_TABLE}), ev.id, gen_random_uuid(),
         now() + interval '1 hour'
FROM ev"""


def test_delivery_completion_and_lease_extension_do_not_scan_a_grown_table(conn):
    from django_pgqueue.models import Endpoint
    from django_pgqueue.webhooks.delivery_source import DeliverySource

    Endpoint.objects.create(url="https://example.com/hook", event_types=["e"])
    source = DeliverySource("plan-test")
    miss = DeliveryOutcome(
        id=1, token=NOBODY, status="succeeded", verdict="success", status_code=200
    )

    def work() -> None:
        source.write_outcomes(conn, [miss])
        source.extend_leases(conn, [1], [NOBODY], 60.0)
        source.read_outcomes(conn, [1])

    warm_then_grow(conn, work, FILL_DELIVERIES, sql.DELIVERY_TABLE)

    assert seq_scans(conn, sql.DELIVERY_TABLE, work) == 0


def test_burst_checks_do_not_scan_a_grown_table(conn):
    source = JobSource(TaskRunner("plan-test", 60.0))
    atomic = AtomicJobSource("plan-test")
    params = {"all_queues": True, "queues": [], "limit": 10}

    def work() -> None:
        assert not source.any_due(conn, params)
        assert not source.any_left(conn, params)
        assert not atomic.any_left(conn, params)

    # Finished rows: the checks' partial indexes hold none of them, a scan reads all.
    finished = (
        FILL_JOBS.replace("'in_progress'", "'succeeded'")
        .replace("locked_by, locked_until\n", "locked_by, locked_until, finished_at\n")
        .replace("gen_random_uuid(), now() + interval '1 hour'", "NULL, NULL, now()")
    )
    warm_then_grow(conn, work, finished, sql.JOB_TABLE)

    assert seq_scans(conn, sql.JOB_TABLE, work) == 0


def test_trace_context_read_does_not_scan_a_grown_table(conn):
    def work() -> None:
        conn.execute(sql.READ_TRACE_CONTEXTS, {"ids": [1, 2]}).fetchall()

    warm_then_grow(conn, work, FILL_JOBS, sql.JOB_TABLE)

    assert seq_scans(conn, sql.JOB_TABLE, work) == 0


def test_delivery_claim_and_burst_checks_do_not_scan_a_grown_table(conn):
    from django_pgqueue.models import Endpoint
    from django_pgqueue.webhooks.delivery_source import DeliverySource

    Endpoint.objects.create(url="https://example.com/hook", event_types=["e"])
    source = DeliverySource("plan-test")
    params = {"all_queues": True, "queues": [], "limit": 10, "lease": 60.0, "worker_id": "t"}

    def warm_up() -> None:
        assert source.claim(conn, params) == []
        checks()

    def checks() -> None:
        source.any_due(conn, params)
        source.any_left(conn, params)

    pending = FILL_DELIVERIES.replace("'in_progress'", "'pending'").replace(
        "gen_random_uuid(),\n         now() + interval '1 hour'", "NULL, NULL"
    )
    warm_then_grow(conn, warm_up, pending, sql.DELIVERY_TABLE)

    claimed: list[Any] = []
    assert (
        seq_scans(conn, sql.DELIVERY_TABLE, lambda: claimed.extend(source.claim(conn, params))) == 0
    )
    assert len(claimed) == 10
    # An EXISTS may rightly start a sequential scan once autovacuum has analysed the
    # grown table (nearly every row matches, so the first page answers): what must
    # not happen is reading the table through. Counted in rows, not in scans.
    assert rows_read_by_seq_scans(conn, sql.DELIVERY_TABLE, checks) < ROWS // 100


def test_worker_statements_are_never_given_a_generic_plan(conn):
    """What keeps the tests above green: PostgreSQL plans every run (PLAN_EACH_RUN)."""
    source = JobSource(TaskRunner("plan-test", 60.0))
    params = {"all_queues": True, "queues": [], "limit": 10, "lease": 60.0, "worker_id": "t"}
    miss = JobOutcome(id=1, token=NOBODY, status="succeeded", result_json="null")
    plain = JobOutcome(id=1, token=NOBODY, status="succeeded", result_json="null", step=False)
    for _ in range(WARM_UP):
        source.claim(conn, params)
        source.write_outcomes(conn, [miss])
        source.write_outcomes(conn, [plain])
        source.extend_leases(conn, [1], [NOBODY], 60.0)
        source.read_outcomes(conn, [1])
        source.any_due(conn, params)

    rows = conn.execute(
        "SELECT substring(statement FROM 'pgqueue:[a-z_]+'), generic_plans, custom_plans"
        " FROM pg_prepared_statements WHERE statement LIKE '%%pgqueue:%%'"
    ).fetchall()
    assert {name for name, _, _ in rows} >= {
        "pgqueue:claim",
        "pgqueue:complete",
        "pgqueue:extend_job_leases",
        "pgqueue:read_outcomes",
        "pgqueue:any_due",
    }
    assert all(generic == 0 and custom >= WARM_UP - 2 for _, generic, custom in rows), rows


def test_claims_do_not_scan_an_analysed_backlog(conn):
    """With the table analysed after a backlog built up (autovacuum's normal work),
    the planner knows nearly every row is due: each claim must still read its rows
    through the indexes, not the backlog (a semi-join it may hash over a sequential
    scan of every due delivery)."""
    from django_pgqueue.models import Endpoint
    from django_pgqueue.webhooks.delivery_source import DeliverySource

    Endpoint.objects.create(url="https://example.com/hook", event_types=["e"])
    deliveries = DeliverySource("plan-test")
    jobs = JobSource(TaskRunner("plan-test", 60.0))
    params = {"all_queues": True, "queues": [], "limit": 10, "lease": 60.0, "worker_id": "t"}
    pending_deliveries = FILL_DELIVERIES.replace("'in_progress'", "'pending'").replace(
        "gen_random_uuid(),\n         now() + interval '1 hour'", "NULL, NULL"
    )
    pending_jobs = FILL_JOBS.replace("'in_progress'", "'pending'").replace(
        "gen_random_uuid(), now() + interval '1 hour'", "NULL, NULL"
    )
    for fill, table in ((pending_deliveries, sql.DELIVERY_TABLE), (pending_jobs, sql.JOB_TABLE)):
        grow(conn, fill, table)
        conn.execute(f"ANALYZE {table}")
    for source, table in ((deliveries, sql.DELIVERY_TABLE), (jobs, sql.JOB_TABLE)):
        for _ in range(WARM_UP):
            claimed: list[Any] = []
            read = rows_read_by_seq_scans(
                conn, table, lambda s=source, c=claimed: c.extend(s.claim(conn, params))
            )
            assert len(claimed) == 10
            assert read < ROWS // 100, (table, read)


def test_the_queue_marks_check_does_not_scan_a_grown_table(conn):
    """The claims' once-a-second question "does any queue have a row?" (``upkeep``),
    asked while the worker waits for a NOTIFY: a plan cached on an empty table read
    the whole job table each time (5 to 16 ms under a held-back horizon), and the
    claim a NOTIFY woke waited for it."""
    params = {"all_queues": True, "queues": [], "limit": 10, "lease": 60.0, "worker_id": "t"}

    def check() -> None:
        store._configured["at"] = -1e9  # due now
        store.upkeep(conn, params)

    warm_then_grow(
        conn,
        check,
        FILL_JOBS.replace("'in_progress'", "'pending'").replace(
            "gen_random_uuid(), now() + interval '1 hour'", "NULL, NULL"
        ),
        sql.JOB_TABLE,
    )
    assert rows_read_by_seq_scans(conn, sql.JOB_TABLE, check) == 0
