"""Exactly-once database effects of atomic tasks under kill -9 and terminated backends.

100 jobs each insert one effect row (demo ``TaskRun``) and then sleep, so faults
land between the effect and the completion. Two worker processes run them while
the test repeatedly kill -9s a worker (and starts a new one) and terminates the
database session of a task in flight. Atomic tasks end with exactly one effect
row per job; the same run with ordinary (leased, at-least-once) tasks shows
duplicates, so the test tells the two modes apart.
"""

from __future__ import annotations

import random
import signal
import time

import pytest

from .conftest import worker_env
from .helpers import query, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.timeout(300), pytest.mark.django_db(transaction=True)]

JOBS = 100
KILLS = 6
TERMINATIONS = 6

# A task between its effect and its completion. Atomic: its transaction is open
# and its last statement was the effect's INSERT. Leased: the effect committed and
# the row is still held.
MID_TASK = {
    "atomic": """SELECT pid FROM pg_stat_activity WHERE state = 'idle in transaction'
                 AND query LIKE 'INSERT INTO "demo_taskrun"%%'""",
    "leased": """SELECT r.job_id FROM demo_taskrun r JOIN pgqueue_job j ON j.id = r.job_id
                 WHERE j.status = 'in_progress' LIMIT 1""",
}
# The session of a task that just wrote its effect (in either mode).
TASK_SESSIONS = """SELECT pid FROM pg_stat_activity
                   WHERE query LIKE 'INSERT INTO "demo_taskrun"%%' AND pid <> pg_backend_pid()"""


def effect_counts(dsn: str, ids: list[int]) -> dict[int, tuple[str, int]]:
    rows = query(
        dsn,
        "SELECT j.id, j.status, (SELECT count(*) FROM demo_taskrun r WHERE r.job_id = j.id)"
        " FROM pgqueue_job j WHERE j.id = ANY(%s)",
        (ids,),
    )
    return {job_id: (status, n) for job_id, status, n in rows}


@pytest.mark.parametrize("mode", ["atomic", "leased"])
def test_effects_exactly_once_only_in_atomic_mode(mode, worker_process, test_dsn, summary):
    from django_pgqueue import enqueue_many
    from testproject.demo import tasks

    task = tasks.atomic_effect if mode == "atomic" else tasks.leased_effect
    ids = [int(r.id) for r in enqueue_many(task, [((), {"label": mode, "sleep": 0.2})] * JOBS)]
    env = worker_env(PGQUEUE_LOG_LEVEL="WARNING")
    workers = [worker_process("--concurrency", "4", env=env) for _ in range(2)]
    rng = random.Random(11)
    kills = terminations = 0
    deadline = time.monotonic() + 240

    def done() -> bool:
        return all(s == "succeeded" for s, _ in effect_counts(test_dsn, ids).values())

    while (kills < KILLS or terminations < TERMINATIONS) and not done():
        assert time.monotonic() < deadline, "faults could not be injected in time"
        if not query(test_dsn, MID_TASK[mode]):
            time.sleep(0.02)
            continue
        if kills <= terminations and kills < KILLS:
            victim = rng.choice([w for w in workers if w.proc.poll() is None])
            victim.kill()  # kill -9 with tasks between effect and completion
            workers.remove(victim)
            workers.append(worker_process("--concurrency", "4", env=env))
            kills += 1
        else:
            sessions = query(test_dsn, TASK_SESSIONS)
            if sessions:
                query(test_dsn, "SELECT pg_terminate_backend(%s)", (rng.choice(sessions)[0],))
                terminations += 1
        time.sleep(0.3)  # let work resume between faults

    wait_until(done, 120, "every job to succeed")
    # A worker started by the last kill may still be importing Django: SIGTERM before
    # its handlers exist ends it with -15. Its heartbeat row is written after they are.
    pids = [w.pid for w in workers]
    wait_until(
        lambda: (
            len(query(test_dsn, "SELECT 1 FROM pgqueue_worker WHERE pid = ANY(%s)", (pids,)))
            == len(pids)
        ),
        60,
        "every worker to have started",
    )
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(30) == 0
    counts = effect_counts(test_dsn, ids)
    lost = [i for i in ids if i not in counts or counts[i][1] == 0]
    duplicates = sum(n - 1 for _, n in counts.values() if n > 1)
    attempts = query(test_dsn, "SELECT sum(attempts) FROM pgqueue_job WHERE id = ANY(%s)", (ids,))
    summary(
        faults=kills + terminations,
        tasks=JOBS,
        duplicates=duplicates,
        lost=len(lost),
        note=f"{mode}: {kills} kill -9, {terminations} backends terminated, "
        f"{sum(n for _, n in counts.values())} effect rows, {attempts[0][0]} attempts recorded",
    )
    assert not lost
    assert {s for s, _ in counts.values()} == {"succeeded"}
    if mode == "atomic":
        assert duplicates == 0, counts
        assert all(n == 1 for _, n in counts.values())
    else:
        # The control run: the same faults duplicate effects of at-least-once tasks.
        assert duplicates > 0
