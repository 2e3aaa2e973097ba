"""kill -9 during the history's work: a worker killed while its maintenance moves
finished jobs, and a ``pgqueue_prune`` killed while it drops partitions. Nothing is
lost, nothing is in both tables, and the next run finishes the work.

Each kill is a SIGKILL of the real process, followed at once by
``pg_terminate_backend`` of its session, so the statement in flight is cut on the
server side too rather than left to finish.
"""

from __future__ import annotations

import signal

import psycopg
import pytest

from django_pgqueue import history
from django_pgqueue.db import connect
from django_pgqueue.maintenance import prune

from .conftest import worker_env
from .helpers import kill_prune_when, query, terminate, wait_until

pytestmark = [
    pytest.mark.fault,
    pytest.mark.timeout(300),
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("clean_history"),
]

FINISHED = 200_000

# Finished jobs of the last days, as workers leave them, in the live table.
FILL_LIVE = """
INSERT INTO pgqueue_job (
    status, priority, attempts, max_attempts, next_attempt_at, worker_id, last_error,
    errors, created_at, finished_at, updated_at, task_path, queue_name, backend, args,
    kwargs, worker_ids, atomic)
SELECT (ARRAY['succeeded', 'dead', 'cancelled'])[1 + i %% 3], 0, 1, 5, now(), 'w', '', '[]',
       now() - pg_catalog.make_interval(days => i %% 4, secs => 60 + i %% 1000),
       now() - pg_catalog.make_interval(days => i %% 4, secs => 60 + i %% 1000),
       now() - pg_catalog.make_interval(days => i %% 4, secs => 60 + i %% 1000),
       'testproject.demo.tasks.add', 'default', 'default', '[]', '{}', '[]', false
FROM generate_series(1, %s) AS i
"""


def counts(dsn: str) -> tuple[int, int, int, int]:
    """(rows live, rows in history, distinct ids in both, ids in both tables)."""
    ((live, hist, distinct, both),) = query(
        dsn,
        "SELECT (SELECT count(*) FROM pgqueue_job), (SELECT count(*) FROM pgqueue_job_history),"
        " (SELECT count(DISTINCT id) FROM (SELECT id FROM pgqueue_job UNION ALL"
        "  SELECT id FROM pgqueue_job_history) AS a),"
        " (SELECT count(*) FROM pgqueue_job JOIN pgqueue_job_history USING (id))",
    )
    return live, hist, distinct, both


def test_kill9_of_a_worker_while_it_moves_finished_jobs(worker_process, test_dsn, summary):
    query(test_dsn, FILL_LIVE, (FINISHED,))
    ids = {r[0] for r in query(test_dsn, "SELECT id FROM pgqueue_job")}
    worker = worker_process(
        "--concurrency",
        "1",
        env=worker_env(PGQUEUE_HISTORY_DELAY_SECONDS="0", PGQUEUE_MAINTENANCE_INTERVAL="0.2"),
    )
    # Kill it in the middle of the move: some rows moved, most not yet.
    wait_until(lambda: counts(test_dsn)[1] > 5000, 120, "the mover started")
    worker.kill()
    cut = terminate(test_dsn, "pgqueue-maintenance")
    assert worker.proc.returncode == -signal.SIGKILL
    live, hist, distinct, both = counts(test_dsn)
    summary(
        faults=1,
        tasks=FINISHED,
        duplicates=both,
        lost=FINISHED - distinct,
        note=f"killed after {hist} of {FINISHED} moved, {cut} session(s) cut",
    )
    assert live > 0, "the move finished before the kill: nothing was tested"
    assert (live + hist, distinct, both) == (FINISHED, FINISHED, 0)  # none lost, none twice

    # The next run (here in-process) finishes the move.
    with connect("test-mover") as conn:
        history.move_finished(conn, delay=0)
    live, hist, distinct, both = counts(test_dsn)
    assert (live, hist, distinct, both) == (0, FINISHED, FINISHED, 0)
    moved = {r[0] for r in query(test_dsn, "SELECT id FROM pgqueue_job_history")}
    assert moved == ids


def test_kill9_of_a_prune_while_it_drops_partitions(test_dsn, summary):
    """Twenty expired day partitions and one kept; the prune is killed after its first
    drop. Every kept row survives, the next prune drops the rest (a partition left
    detached or detach-pending included)."""
    query(test_dsn, FILL_LIVE.replace("i %% 4", "i %% 21").replace("1 + i %% 3", "1"), (42_000,))
    with connect("test-mover") as conn:
        history.move_finished(conn, delay=0, batch_size=5000)
    kept_ids = {
        r[0]
        for r in query(
            test_dsn,
            # Retention keeps a day partition until its whole day is 7 days old.
            "SELECT id FROM pgqueue_job_history WHERE (date_trunc('day', finished_at, 'UTC')"
            " + interval '1 day') > now() - interval '7 days'",
        )
    }
    assert kept_ids
    with connect("test-count") as conn:
        before = len(history.partitions(conn))

    def dropped_one() -> bool:
        with connect("test-count") as conn:
            return len(history.partitions(conn)) < before

    kill_prune_when(test_dsn, dropped_one, "a partition dropped")
    with connect("test-count") as conn:
        mid = history.partitions(conn)
    left = {r[0] for r in query(test_dsn, "SELECT id FROM pgqueue_job_history")}
    summary(
        faults=1,
        tasks=len(kept_ids),
        duplicates=0,
        lost=len(kept_ids - left),
        note=f"prune killed with {before - len(mid)} of {before} partitions gone",
    )
    assert kept_ids <= left  # no kept row lost
    assert not query(test_dsn, "SELECT 1 FROM pgqueue_job")  # nothing went back live

    prune()
    left = {r[0] for r in query(test_dsn, "SELECT id FROM pgqueue_job_history")}
    assert left == kept_ids
    with connect("test-count") as conn:
        assert all(p.attached_to for p in history.partitions(conn))


def test_maintenance_through_pgbouncer_in_transaction_mode(cluster_db, pgbouncer_proxy):
    """Premade partitions, the mover, retention (DETACH CONCURRENTLY, DROP) and the
    maintenance lock need no session: they run through a transaction-pooling
    PgBouncer, on a connection without prepared statements (PgBouncer < 1.21)."""
    with psycopg.connect(cluster_db.dsn, autocommit=True) as direct:
        direct.execute(FILL_LIVE.replace("i %% 4", "i %% 12"), (3000,))
    bouncer = pgbouncer_proxy(cluster_db.name)
    with psycopg.connect(bouncer.url(), autocommit=True, prepare_threshold=None) as conn:
        report = history.maintain(conn, retention={"succeeded": 7 * 86400.0})
        assert report.moved.moved == 3000 and not report.moved.skipped
        assert report.dropped is not None and report.dropped.dropped
        parts = history.partitions(conn)
    assert all(p.attached_to for p in parts)
    with psycopg.connect(cluster_db.dsn, autocommit=True) as direct:
        (live,) = direct.execute("SELECT count(*) FROM pgqueue_job").fetchone()
        (old,) = direct.execute(
            "SELECT count(*) FROM pgqueue_job_history WHERE status = 'succeeded'"
            " AND finished_at < now() - interval '8 days'"
        ).fetchone()
    assert (live, old) == (0, 0)
