"""The console's rollup under faults: kill -9 of workers mid-drain and ambiguous commits
of completions. A batch's counts ride in its completion statement, so each finished
job is counted exactly once: never for an attempt that a kill cut short, never twice
for a completion whose COMMIT reply was lost and that the worker settled.
"""

from __future__ import annotations

import random
import signal
import time

import pytest

from .conftest import worker_env
from .helpers import enqueue_sql, ledger, query

pytestmark = [pytest.mark.fault, pytest.mark.timeout(300), pytest.mark.django_db(transaction=True)]

JOBS = 800
KILLS = 6
MARKER = b"/* pgqueue:complete */"


def test_the_rollup_counts_each_finished_job_once_through_kills_and_lost_replies(
    worker_process, cluster_db, fault_proxy, summary
):
    dsn = cluster_db.dsn
    ids = enqueue_sql(dsn, JOBS, kwargs={"sleep": 0.02}, max_attempts=20)
    fault_proxy.cut_after_marker(MARKER, times=3)
    env = worker_env(DATABASE_URL=fault_proxy.dsn_for(cluster_db.url), PGQUEUE_LOG_LEVEL="WARNING")

    def start():
        return worker_process("--concurrency", "4", env=env)

    workers = [start(), start()]
    rng = random.Random(27)
    kills = 0
    deadline = time.monotonic() + 240
    while ledger(dsn, ids).stuck:
        assert time.monotonic() < deadline, ledger(dsn, ids)
        time.sleep(rng.uniform(0.3, 0.8))
        if kills < KILLS:
            victim = rng.choice([w for w in workers if w.proc.poll() is None])
            victim.kill()  # kill -9, wherever it is: mid-claim, mid-task, mid-completion
            workers.remove(victim)
            workers.append(start())
            kills += 1
    for worker in workers:
        if worker.proc.poll() is None:
            worker.signal(signal.SIGTERM)
    for worker in workers:
        worker.wait(30)

    book = ledger(dsn, ids)
    assert book.states == {"succeeded": JOBS} and not book.lost, book
    ((ok, failed, retried),) = query(
        dsn,
        "SELECT COALESCE(sum(ok), 0), COALESCE(sum(failed), 0), COALESCE(sum(retried), 0)"
        " FROM pgqueue_rollup WHERE kind = 'queue' AND name = 'default'",
    )
    assert (ok, failed) == (JOBS, 0)
    # Every counted completion is in the run-time histogram once as well (a killed
    # attempt completes nothing: its row comes back through its lease, uncounted).
    ((in_histogram,),) = query(
        dsn,
        "SELECT COALESCE(sum(b), 0) FROM pgqueue_rollup, unnest(run_hist) AS b"
        " WHERE kind = 'queue' AND name = 'default'",
    )
    assert in_histogram == ok + failed + retried
    assert fault_proxy.cuts >= 1
    summary(
        faults=kills + fault_proxy.cuts,
        tasks=JOBS,
        duplicates=book.duplicates,
        lost=0,
        note=f"{kills} kill -9 and {fault_proxy.cuts} ambiguous completion commits during a "
        f"drain of {JOBS} jobs: the rollup counted {ok} succeeded, exactly one per job",
    )
