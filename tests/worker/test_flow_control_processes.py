"""Flow control with real worker processes: the limits hold across processes, and a
pause stops new starts within one poll. Each task records its running interval
(``record_interval``); the peak of overlapping intervals is the concurrency seen.

``PGQUEUE_FLOW_FULL=1`` runs them at the sizes of docs/flow-control.md's figures
(3 processes of 8 threads, 300 jobs of 0.2 s per limit, a flood of 20,000 jobs);
the suite's default is smaller, for time.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import defaultdict

import pytest

from django_pgqueue import queues
from django_pgqueue.models import Job
from testproject.demo import tasks
from testproject.demo.models import TaskRun

from ..conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

POLL = "0.2"
FULL = os.environ.get("PGQUEUE_FLOW_FULL") == "1"
#: Worker processes and threads of each drain, jobs per limited queue or key, and
#: the small tenant's flood.
PROCESSES, THREADS = (3, 8) if FULL else (2, 4)
JOBS = 300 if FULL else 36
PER_KEY = 150 if FULL else 16
FLOOD = 20_000 if FULL else 2_000


def intervals() -> dict[str, list[tuple[float, float]]]:
    """The recorded running intervals, by tag."""
    found: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for label in TaskRun.objects.values_list("label", flat=True):
        tag, start, end = label.split(" ")
        found[tag].append((float(start), float(end)))
    return found


def peak(spans: list[tuple[float, float]]) -> int:
    """Most intervals open at one instant."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = best = 0
    for _, step in events:
        running += step
        best = max(best, running)
    return best


def drain(worker_process, env: dict[str, str] | None = None) -> None:
    """PROCESSES worker processes of THREADS threads each (as on as many hosts), until
    nothing is left."""
    procs = [
        worker_process(
            "--concurrency", str(THREADS), "--until-empty", "--poll-interval", POLL, env=env
        )
        for _ in range(PROCESSES)
    ]
    for proc in procs:
        assert proc.wait(300) == 0, proc.output()


def test_global_limit_holds_across_processes(worker_process):
    queues.configure("reports", concurrency=3)
    task = tasks.record_interval.using(queue_name="reports")
    for _ in range(JOBS):
        task.enqueue(0.2, "reports")
    tasks.record_interval.enqueue(0.2, "free")  # an unlimited queue runs beside it
    drain(worker_process)
    spans = intervals()
    assert len(spans["reports"]) == JOBS  # every job ran: none lost
    print(
        f"peak concurrency of a limit of 3 over {PROCESSES} x {THREADS}: {peak(spans['reports'])}"
    )
    assert peak(spans["reports"]) == 3
    assert not Job.objects.exclude(status="succeeded").exists()


def test_per_key_limit_holds_across_processes(worker_process):
    queues.configure("tenants", key_concurrency=2)
    for key in ("acme", "globex"):
        task = tasks.record_interval.using(queue_name="tenants", concurrency_key=key)
        for _ in range(PER_KEY):
            task.enqueue(0.2, key)
    drain(worker_process)
    spans = intervals()
    assert {key: len(s) for key, s in spans.items()} == {"acme": PER_KEY, "globex": PER_KEY}
    assert peak(spans["acme"]) == 2 and peak(spans["globex"]) == 2
    assert peak(spans["acme"] + spans["globex"]) == 4  # both keys ran at once


def test_pause_stops_new_starts_within_one_poll(worker_process):
    task = tasks.record_interval.using(queue_name="reports")
    for _ in range(80):
        task.enqueue(0.2, "reports")
    proc = worker_process(
        "--processes", "2", "--concurrency", "4", "--poll-interval", POLL, "--prefetch", "0"
    )
    wait_for(lambda: TaskRun.objects.count() >= 8, 60, "the drain to be under way")
    queues.pause("reports")
    paused_at = time.time()
    time.sleep(2.0)
    late = [s for s, _ in intervals()["reports"] if s > paused_at + float(POLL) + 0.5]
    assert late == []
    waiting = Job.objects.filter(status="pending").count()
    assert waiting > 0
    assert not Job.objects.filter(status="in_progress").exists()  # running jobs finished
    queues.resume("reports")
    wait_for(lambda: not Job.objects.exclude(status="succeeded").exists(), 60, "the rest to run")
    assert TaskRun.objects.count() == 80  # none lost
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def test_rate_limit_holds_across_processes(worker_process):
    queues.configure("payments", rate_limit=5, rate_period=1)
    task = tasks.record_interval.using(queue_name="payments")
    for _ in range(20):
        task.enqueue(0.0, "payments")
    drain(worker_process)
    starts = sorted(s for s, _ in intervals()["payments"])
    assert len(starts) == 20
    # GCRA: a bucket of 5 that refills at 5 a second; so at most 5 + 5 starts in any
    # second, and the last of 20 no sooner than (20 - 5) / 5 s after the first.
    assert max(sum(1 for t in starts if s <= t < s + 1.0) for s in starts) <= 10
    assert starts[-1] - starts[0] >= 2.8


def most_in_a_window(starts: list[float], window: float) -> int:
    """Most of ``starts`` in any ``window`` seconds."""
    return max(sum(1 for t in starts if s <= t < s + window) for s in starts)


def test_per_key_rate_limit_from_settings_holds_across_processes(worker_process):
    """Two keys each capped at 3 starts a second, given in PGQUEUE["QUEUES"]: the
    workers make the row as they start, and each key keeps to its own rate while
    both run side by side."""
    env = {"PGQUEUE_TEST_QUEUES": json.dumps({"metered": {"key_rate_limit": 3}})}
    for key in ("acme", "globex"):
        task = tasks.record_interval.using(queue_name="metered", concurrency_key=key)
        for _ in range(12):
            task.enqueue(0.0, key)
    drain(worker_process, env)
    row = queues.get("metered")
    assert (row.key_rate_limit, row.key_rate_period, row.overridden_at) == (3, 1, None)
    spans = intervals()
    assert {key: len(s) for key, s in spans.items()} == {"acme": 12, "globex": 12}  # none lost
    for key in ("acme", "globex"):
        starts = sorted(s for s, _ in spans[key])
        # GCRA per key: a bucket of 3 refilled at 3 a second, so at most 3 + 3 starts
        # in any second and the 12th no sooner than (12 - 3) / 3 s after the first.
        assert most_in_a_window(starts, 1.0) <= 6, starts
        assert starts[-1] - starts[0] >= 2.8, starts
    both = sorted(s for s, _ in spans["acme"] + spans["globex"])
    # The keys are limited apart: together they start more than one key may.
    assert most_in_a_window(both, 1.0) > 6
    assert not Job.objects.exclude(status="succeeded").exists()
    assert not Job.objects.filter(attempts__gt=1).exists()  # no attempt spent waiting


def test_a_lone_small_tenant_gets_through_a_flood(worker_process):
    """Round robin over keys: tenant A has FLOOD jobs queued, tenant B then enqueues
    10; B's jobs start at once, not after A's backlog."""
    from django.db import connection

    queues.configure("tenants")  # a row without limits: the round robin alone
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO pgqueue_job (status, priority, attempts, max_attempts,
                next_attempt_at, worker_id, last_error, errors, created_at, updated_at,
                task_path, queue_name, backend, args, kwargs, worker_ids, concurrency_key,
                flow_controlled)
            SELECT 'pending', 0, 0, 3, now(), '', '', '[]', now(), now(),
                   'testproject.demo.tasks.record_interval', 'tenants', 'default',
                   '[0.01, "A"]', '{}', '[]', 'A', true FROM generate_series(1, %s)""",
            [FLOOD],
        )
    proc = worker_process("--concurrency", "8", "--poll-interval", POLL)
    wait_for(lambda: TaskRun.objects.count() >= 50, 60, "tenant A's drain to be under way")
    task = tasks.record_interval.using(queue_name="tenants", concurrency_key="B")
    ids = [int(task.enqueue(0.01, "B").id) for _ in range(10)]
    wait_for(
        lambda: Job.objects.filter(pk__in=ids, status="succeeded").count() == 10,
        60,
        "tenant B's jobs to run",
    )
    waits = sorted(
        (job.started_at - job.created_at).total_seconds() for job in Job.objects.filter(pk__in=ids)
    )
    a_left = Job.objects.filter(concurrency_key="A").exclude(status="succeeded").count()
    print(f"tenant B's waits behind {FLOOD} of tenant A's jobs: {waits}")
    assert waits[len(waits) // 2] < 1.0, waits
    assert a_left > 0  # B did not wait for A's backlog to drain
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def test_capacity_comes_back_after_a_killed_workers_leases(worker_process):
    """kill -9 of a worker holding the whole limit: its jobs stay counted until their
    leases lapse, then they are taken back and every job runs, the limit held."""
    queues.configure("reports", concurrency=2)
    env = {"PGQUEUE_LEASE_SECONDS": "2"}
    task = tasks.record_interval.using(queue_name="reports")
    held = [int(task.enqueue(3.0, "reports").id) for _ in range(2)]
    doomed = worker_process("--concurrency", "2", "--poll-interval", POLL, env=env)
    wait_for(
        lambda: Job.objects.filter(pk__in=held, status="in_progress").count() == 2,
        60,
        "the first worker to hold the limit",
    )
    later = [int(task.enqueue(0.1, "reports").id) for _ in range(4)]
    doomed.signal(signal.SIGKILL)
    doomed.wait(30)
    proc = worker_process("--concurrency", "4", "--poll-interval", POLL, env=env)
    wait_for(
        lambda: Job.objects.filter(pk__in=held + later, status="succeeded").count() == 6,
        60,
        "every job to run after the leases lapsed",
    )
    spans = intervals()["reports"]
    assert len(spans) == 6  # none lost (the killed attempts recorded nothing)
    assert peak(spans) <= 2
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0
