"""Periodic tasks across real worker processes sharing an injected clock.

The clock is a file every worker reads (``PGQUEUE_TEST_CLOCK_FILE``, honoured only
with ``PGQUEUE["TEST_HOOKS"]``); the test moves it one tick at a time and waits
for the tick's row in the database, a barrier rather than a sleep.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal

import pytest

from django_pgqueue.models import Job, ScheduleTick

from ..conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

UTC = dt.UTC
START = dt.datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)
SCHEDULE = {"every-minute": {"task": "testproject.demo.tasks.add", "cron": "* * * * *"}}


def set_clock(path, now: dt.datetime) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(now.isoformat())
    os.replace(tmp, path)  # readers see the old or the new instant, never half


def env_for(clock_path, schedule=SCHEDULE, **extra: str) -> dict[str, str]:
    return {
        "PGQUEUE_TEST_HOOKS": "1",
        "PGQUEUE_TEST_CLOCK_FILE": str(clock_path),
        "PGQUEUE_TEST_SCHEDULE": json.dumps(schedule),
        "PGQUEUE_SCHEDULER_INTERVAL": "0.05",
        "PGQUEUE_POLL_INTERVAL": "0.2",
        "PGQUEUE_LOG_LEVEL": "INFO",
        **extra,
    }


def started(proc) -> bool:
    return any("Scheduler started" in line for line in proc.lines)


def enqueued_lines(proc) -> int:
    return sum("tick" in line and "enqueued as job" in line for line in proc.lines)


def tick_at(minute: int) -> dt.datetime:
    return START.replace(second=0) + dt.timedelta(minutes=minute)


def advance_and_wait(clock_path, minute: int, name: str = "every-minute") -> None:
    set_clock(clock_path, tick_at(minute) + dt.timedelta(seconds=1))
    wait_for(
        lambda: ScheduleTick.objects.filter(
            schedule_name=name, tick_at=tick_at(minute), job_id__isnull=False
        ).exists(),
        30,
        f"the tick of minute {minute}",
    )


def stop_all(procs) -> None:
    for proc in procs:
        if proc.proc.poll() is None:
            proc.signal(signal.SIGTERM)
    for proc in procs:
        proc.wait(60)


def test_three_worker_processes_give_exactly_one_job_per_tick(worker_process, tmp_path):
    clock = tmp_path / "clock"
    set_clock(clock, START)
    procs = [worker_process(env=env_for(clock)) for _ in range(3)]
    wait_for(lambda: all(started(p) for p in procs), 60, "three schedulers to start")
    ticks = 30
    for minute in range(1, ticks + 1):
        advance_and_wait(clock, minute)
    stop_all(procs)  # a graceful stop ends every pass in flight
    rows = list(ScheduleTick.objects.order_by("tick_at").values_list("tick_at", "job_id"))
    assert [t for t, _ in rows] == [tick_at(m) for m in range(1, ticks + 1)]
    jobs = Job.objects.filter(task_path="testproject.demo.tasks.add")
    assert jobs.count() == ticks
    assert sorted(j for _, j in rows) == sorted(jobs.values_list("id", flat=True))
    per_process = [enqueued_lines(p) for p in procs]
    assert sum(per_process) == ticks, per_process
    print(f"ticks enqueued per process: {per_process}")


def test_a_worker_killed_at_a_tick_still_gives_exactly_one(worker_process, tmp_path):
    clock = tmp_path / "clock"
    set_clock(clock, START)
    doomed = worker_process(env=env_for(clock, PGQUEUE_TEST_PAUSE_AT="scheduler_tick"))
    wait_for(lambda: started(doomed), 60, "the first scheduler to start")
    set_clock(clock, tick_at(1) + dt.timedelta(seconds=1))
    paused = doomed.wait_line("PAUSED scheduler_tick", timeout=60)
    assert paused.split()[2] == "every-minute"
    # The doomed worker holds the tick's row, uncommitted. Two more workers start
    # and try the same tick: their INSERTs wait on that row.
    others = [worker_process(env=env_for(clock)) for _ in range(2)]
    wait_for(lambda: all(started(p) for p in others), 60, "two more schedulers")
    assert not ScheduleTick.objects.exists()
    doomed.kill()  # kill -9 in the middle of the tick's transaction
    wait_for(
        lambda: ScheduleTick.objects.filter(tick_at=tick_at(1), job_id__isnull=False).exists(),
        30,
        "a surviving worker to enqueue the tick",
    )
    for minute in range(2, 6):
        advance_and_wait(clock, minute)
    stop_all(others)
    rows = list(ScheduleTick.objects.order_by("tick_at").values_list("tick_at", flat=True))
    assert rows == [tick_at(m) for m in range(1, 6)]
    assert Job.objects.filter(task_path="testproject.demo.tasks.add").count() == 5
    assert sum(enqueued_lines(p) for p in others) == 5


def test_a_schedule_removed_from_settings_stops_after_the_deploy(worker_process, tmp_path):
    clock = tmp_path / "clock"
    set_clock(clock, START)
    both = {**SCHEDULE, "removed": {"task": "testproject.demo.tasks.add", "cron": "* * * * *"}}
    old = [worker_process(env=env_for(clock, both)) for _ in range(2)]
    wait_for(lambda: all(started(p) for p in old), 60, "the old workers")
    advance_and_wait(clock, 1)
    wait_for(
        lambda: ScheduleTick.objects.filter(schedule_name="removed", job_id__isnull=False).exists(),
        30,
        "the schedule about to be removed to run once",
    )
    stop_all(old)
    # The deploy: the same workers, without "removed" in PGQUEUE["SCHEDULE"].
    new = [worker_process(env=env_for(clock)) for _ in range(2)]
    wait_for(lambda: all(started(p) for p in new), 60, "the new workers")
    for minute in range(2, 6):
        advance_and_wait(clock, minute)
    stop_all(new)
    names = list(ScheduleTick.objects.values_list("schedule_name", flat=True))
    assert names.count("every-minute") == 5
    assert names.count("removed") == 1
