"""Flow control with real worker processes: the limits hold across processes, and a
pause stops new starts within one poll. Each task records its running interval
(``record_interval``); the peak of overlapping intervals is the concurrency seen.
"""

from __future__ import annotations

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


def drain(worker_process) -> None:
    """Two worker processes of four threads each (as on two hosts), until nothing is left."""
    procs = [
        worker_process("--concurrency", "4", "--until-empty", "--poll-interval", POLL)
        for _ in range(2)
    ]
    for proc in procs:
        assert proc.wait(120) == 0, proc.output()


def test_global_limit_holds_across_processes(worker_process):
    queues.configure("reports", concurrency=3)
    task = tasks.record_interval.using(queue_name="reports")
    for _ in range(36):
        task.enqueue(0.2, "reports")
    tasks.record_interval.enqueue(0.2, "free")  # an unlimited queue runs beside it
    drain(worker_process)
    spans = intervals()
    assert len(spans["reports"]) == 36  # every job ran: none lost
    assert peak(spans["reports"]) == 3
    assert not Job.objects.exclude(status="succeeded").exists()


def test_per_key_limit_holds_across_processes(worker_process):
    queues.configure("tenants", key_concurrency=2)
    for key in ("acme", "globex"):
        task = tasks.record_interval.using(queue_name="tenants", concurrency_key=key)
        for _ in range(16):
            task.enqueue(0.2, key)
    drain(worker_process)
    spans = intervals()
    assert {key: len(s) for key, s in spans.items()} == {"acme": 16, "globex": 16}
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
