"""``max_attempts`` of an atomic task holds exactly across worker processes.

Each attempt of the task below leaves an outside mark (a line in a file: no
transaction takes it back) and then raises, so its writes roll back. Three worker
processes of four threads each run a dozen such jobs: every job must end ``dead``
after exactly its three attempts, and every attempt must have run exactly once.
Before attempts counted themselves, the rolled-back count let another thread claim
the row again before its failure was written, and jobs ran four or five times.
"""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

from django_pgqueue import task

from .conftest import worker_env
from .helpers import query, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.timeout(180), pytest.mark.django_db(transaction=True)]

JOBS = 12
ATTEMPTS = 3


@task(atomic=True, max_attempts=ATTEMPTS)
def fails_after_an_outside_mark(path: str, label: str) -> None:
    with open(path, "a", encoding="utf-8") as marks:
        marks.write(f"{label}\n")
    time.sleep(0.02)  # other threads and processes look for due rows meanwhile
    raise RuntimeError(f"{label}: fails every time")


def test_max_attempts_holds_exactly_across_worker_processes(worker_process, test_dsn, tmp_path):
    marks = tmp_path / "marks"
    marks.touch()
    labels = [f"job-{n}" for n in range(JOBS)]
    ids = [int(fails_after_an_outside_mark.enqueue(str(marks), label).id) for label in labels]
    env = worker_env(PGQUEUE_LOG_LEVEL="WARNING")
    workers = [worker_process("--concurrency", "4", env=env) for _ in range(3)]

    def states() -> dict[int, tuple[str, int]]:
        rows = query(
            test_dsn, "SELECT id, status, attempts FROM pgqueue_job WHERE id = ANY(%s)", (ids,)
        )
        return {job_id: (status, attempts) for job_id, status, attempts in rows}

    wait_until(
        lambda: all(status == "dead" for status, _ in states().values()),
        120,
        "every job to use up its attempts",
    )
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(30) == 0
    assert states() == dict.fromkeys(ids, ("dead", ATTEMPTS))  # none lost
    assert Counter(marks.read_text(encoding="utf-8").split()) == dict.fromkeys(labels, ATTEMPTS)
