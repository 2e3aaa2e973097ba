"""Workflows under chaos: kill -9 of workers, pg_terminate_backend of their sessions
and an ambiguous commit of a completion, while real worker processes run many
five-step workflows (diamonds and chains) and batches (docs/workflows.md).

Each step must have exactly one successful attempt and start only after every one
of its parents succeeded (by the step's own reading of its parents when it
runs), every workflow must finish, every batch callback run exactly once,
and nothing may be lost. ``PGQUEUE_CHAOS_WORKFLOWS`` raises the size (CI: 200).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from ..conftest import REPO
from .conftest import worker_env
from .helpers import query, terminate

pytestmark = [pytest.mark.fault, pytest.mark.timeout(900), pytest.mark.django_db(transaction=True)]

WORKFLOWS = int(os.environ.get("PGQUEUE_CHAOS_WORKFLOWS", "200"))
WORKERS = 3
#: The batched completion's marker: its COMMIT reply is lost (an ambiguous commit).
COMPLETE_MARKER = b"/* pgqueue:complete */"


def _enqueue(url: str, count: int) -> tuple[list[int], list[int]]:
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "testproject.settings"}
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "faults" / "workflow_producer.py"), str(count)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line.split() for line in proc.stdout.splitlines()]
    return (
        [int(i) for kind, i in lines if kind == "WF"],
        [int(i) for kind, i in lines if kind == "BATCH"],
    )


def _left(dsn: str) -> int:
    return query(
        dsn,
        "SELECT count(*) FROM pgqueue_job WHERE status NOT IN ('succeeded', 'dead', 'cancelled')",
    )[0][0]


def test_workflows_finish_exactly_once_under_chaos(
    worker_process, cluster_db, fault_proxy, summary
):
    dsn = cluster_db.dsn
    started = time.monotonic()
    workflows, batches = _enqueue(cluster_db.url, WORKFLOWS)
    enqueue_seconds = time.monotonic() - started
    assert len(workflows) == WORKFLOWS
    steps = query(dsn, "SELECT count(*) FROM pgqueue_job")[0][0]
    assert steps == WORKFLOWS * 5 + len(batches) * 7

    fault_proxy.cut_after_marker(COMPLETE_MARKER, times=2)
    # No history mover: the count below reads the live table, and on a slow machine
    # the drain outlasts the 30 s after which finished steps are filed away.
    env = worker_env(
        DATABASE_URL=fault_proxy.dsn_for(cluster_db.url),
        PGQUEUE_LOG_LEVEL="WARNING",
        PGQUEUE_HISTORY_DELAY_SECONDS="none",
    )

    def start():
        return worker_process("--concurrency", "4", env=env)

    workers = [start() for _ in range(WORKERS)]
    rng = random.Random(25)
    kills = terminations = 0
    ran_at = time.monotonic()
    deadline = ran_at + 600
    while _left(dsn):
        assert time.monotonic() < deadline, f"{_left(dsn)} steps left after 600 s"
        time.sleep(rng.uniform(0.3, 1.2))
        if kills <= terminations:
            victim = rng.choice([w for w in workers if w.proc.poll() is None])
            victim.kill()  # kill -9, wherever it is
            workers.remove(victim)
            workers.append(start())
            kills += 1
        else:
            terminations += terminate(dsn, rng.choice(["pgqueue-complete-%", "pgqueue-worker-%"]))
    drain_seconds = time.monotonic() - ran_at
    for worker in workers:
        if worker.proc.poll() is None:
            worker.signal(signal.SIGTERM)
    for worker in workers:
        worker.wait(30)

    states = dict(query(dsn, "SELECT status, count(*) FROM pgqueue_job GROUP BY 1"))
    assert states == {"succeeded": steps}, states
    # Each step's effect: exactly one for the atomic steps, at least one for the
    # ordinary ones (at-least-once), none of them run before its parents succeeded.
    runs = query(
        dsn,
        "SELECT j.id, j.atomic, j.task_path, count(r.id), "
        "       count(r.id) FILTER (WHERE r.label LIKE 'early:%%')"
        " FROM pgqueue_job j LEFT JOIN demo_taskrun r ON r.job_id = j.id GROUP BY j.id",
    )
    lost = [job_id for job_id, _, _, n, _ in runs if n == 0]
    early = [job_id for job_id, _, _, _, e in runs if e]
    atomic_duplicates = [job_id for job_id, atomic, _, n, _ in runs if atomic and n > 1]
    duplicates = sum(n - 1 for _, _, _, n, _ in runs if n > 1)
    assert not lost and not early and not atomic_duplicates
    # Every edge was counted. Whether a step started only after its parents succeeded
    # is the step's own reading above ("early:" labels): the release and the parent's
    # end commit together, so a claim that sees the step due sees its parents ended.
    # (Comparing the child's ``started_at`` with the parent's ``finished_at`` is no
    # oracle: ``now()`` is the claim's transaction start, which may precede the
    # parent's commit by the claim's planning time on a loaded machine, while the
    # claim's snapshot is taken after it.)
    uncounted = query(dsn, "SELECT child_id FROM pgqueue_workflow_edge WHERE NOT counted")
    assert not uncounted
    # Released exactly once: no counter went below zero or stayed above it.
    assert query(
        dsn,
        "SELECT count(*) FROM pgqueue_job WHERE workflow_id IS NOT NULL"
        " AND (pending_parents <> 0 OR failed_parents <> 0)",
    ) == [(0,)]
    callbacks = query(
        dsn,
        "SELECT r.label, count(*) FROM demo_taskrun r JOIN pgqueue_job j ON j.id = r.job_id"
        " WHERE j.step_name IN ('on_success', 'on_complete') GROUP BY 1",
    )
    assert dict(callbacks) == {"success:5/5/0/0": len(batches), "complete:5/5/0/0": len(batches)}
    assert fault_proxy.cuts >= 1
    summary(
        faults=kills + terminations + fault_proxy.cuts,
        tasks=steps,
        duplicates=duplicates,
        lost=len(lost),
        note=f"{WORKFLOWS} workflows + {len(batches)} batches, {steps} steps: {kills} kill -9, "
        f"{terminations} backends terminated, {fault_proxy.cuts} ambiguous commits; "
        f"enqueue {enqueue_seconds:.1f}s, drain {drain_seconds:.1f}s; "
        f"{duplicates} repeated runs of at-least-once steps, 0 of atomic ones",
    )
