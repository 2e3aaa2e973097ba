"""``runworkers --processes N`` under real process managers: a signal to the whole
process group drains every child once, and children die with their supervisor."""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.db import connection

from django_pgqueue import enqueue_many
from testproject.demo import tasks

from ..conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _held_rows() -> int:
    """Rows some worker still holds (in progress with a lease)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pgqueue_job WHERE status = 'in_progress' "
            "AND locked_until IS NOT NULL"
        )
        return cursor.fetchone()[0]


def _children_of(pid: int) -> list[int]:
    """Live processes whose parent is ``pid`` (from /proc, no extra dependency)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_group_signal_drains_every_child_once(worker_process, sig):
    results = enqueue_many(tasks.record_run, [(("group",), {"sleep": 0.5})] * 40)
    proc = worker_process(
        "--processes", "2", "--concurrency", "2", "--lease", "30",
        env={"PGQUEUE_POLL_INTERVAL": "0.2", "PGQUEUE_LOG_LEVEL": "INFO"},
    )  # fmt: skip
    wait_for(lambda: _held_rows() >= 4, 60, "both children to hold rows", interval=0.05)
    time.sleep(0.2)  # into the 0.5 s tasks: the drain has running tasks to finish
    os.killpg(proc.pid, sig)  # what Ctrl-C and systemd's default KillMode do
    code = proc.wait(60)
    output = proc.output()
    assert "Second signal" not in output, output
    assert code == 0, output
    # Nothing waits out its 30 s lease: every row is finished or back to pending.
    assert _held_rows() == 0
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT status, count(*) FROM pgqueue_job WHERE id = ANY(%s) GROUP BY status",
            [[int(r.id) for r in results]],
        )
        states = dict(cursor.fetchall())
    assert set(states) <= {"succeeded", "pending"}, output
    assert sum(states.values()) == 40  # zero lost
    assert states.get("succeeded", 0) >= 1, output


def test_a_child_killed_by_the_drain_makes_the_exit_code_non_zero(worker_process):
    enqueue_many(tasks.sleep_for, [((30,), {})] * 2)
    # No prefetch: two held rows are then one running task in each child (with a
    # prefetch, one child could hold both while the other is still starting, and a
    # signal before its handlers are in kills it without a drain to wait for).
    proc = worker_process(
        "--processes",
        "2",
        "--concurrency",
        "1",
        "--prefetch",
        "0",
        "--lease",
        "30",
        env={
            "PGQUEUE_POLL_INTERVAL": "0.2",
            "PGQUEUE_SHUTDOWN_GRACE_SECONDS": "30",
            "PGQUEUE_LOG_LEVEL": "INFO",
        },
    )
    wait_for(lambda: _held_rows() >= 2, 60, "both children to run a task", interval=0.05)
    proc.signal(signal.SIGTERM)
    # A child logs the drain only after the supervisor handled the signal and forwarded
    # it: from there, 1.5 s is past the duplicate window on any machine (a fixed sleep
    # after sending was not, when a loaded machine ran the handler late).
    wait_for(lambda: proc.output().count("no new claims") >= 2, 30, "both drains", 0.05)
    time.sleep(1.5)  # past the duplicate window: the second signal is deliberate
    proc.signal(signal.SIGTERM)
    assert proc.wait(30) != 0, proc.output()


def test_children_die_with_a_killed_supervisor(worker_process):
    results = enqueue_many(tasks.record_run, [(("orphan",), {"sleep": 0.2})] * 60)
    proc = worker_process(
        "--processes", "2", "--concurrency", "1", "--lease", "30",
        env={"PGQUEUE_POLL_INTERVAL": "0.2", "PGQUEUE_LOG_LEVEL": "INFO"},
    )  # fmt: skip
    wait_for(lambda: len(_children_of(proc.pid)) == 2, 30, "two children", interval=0.05)
    children = _children_of(proc.pid)
    wait_for(lambda: proc.output().count("starting:") >= 2, 30, "both children up", interval=0.05)
    wait_for(lambda: _held_rows() >= 2, 60, "the children to hold rows", interval=0.05)
    assert all(_alive(c) for c in children), children
    try:
        killed = time.monotonic()
        os.kill(proc.pid, signal.SIGKILL)
        proc.proc.wait(10)
        # The kernel's parent-death signal starts the drain at once; the drain (the
        # running 0.2 s task, the release of prefetched rows) and the interpreter's exit
        # take about 0.6 s on a quiet machine, 0.9 s beside six busy loops.
        wait_for(lambda: not any(_alive(c) for c in children), 10, "the children to exit", 0.02)
        gone_after = time.monotonic() - killed
        assert gone_after < 2.0, f"children gone {gone_after:.2f} s after the supervisor's death"
        # They drained: nothing waits out its 30 s lease, nothing is lost.
        assert _held_rows() == 0
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pgqueue_job WHERE id = ANY(%s) "
                "AND status IN ('succeeded', 'pending')",
                [[int(r.id) for r in results]],
            )
            assert cursor.fetchone()[0] == 60
    finally:
        for child in children:  # only the pids this test saw started
            if _alive(child):
                os.kill(child, signal.SIGKILL)


def test_a_repeat_within_the_window_is_the_same_request(worker_process):
    results = enqueue_many(tasks.record_run, [(("repeat",), {"sleep": 1.0})] * 2)
    proc = worker_process(
        "--concurrency", "2", "--prefetch", "0", "--lease", "30",
        env={"PGQUEUE_POLL_INTERVAL": "0.2", "PGQUEUE_LOG_LEVEL": "INFO"},
    )  # fmt: skip
    wait_for(lambda: _held_rows() == 2, 30, "both tasks to start", interval=0.05)
    proc.signal(signal.SIGTERM)
    time.sleep(0.2)  # what a supervisor's forwarded copy of a group signal looks like
    proc.signal(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()
    assert "Second signal" not in proc.output()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT status, count(*) FROM pgqueue_job WHERE id = ANY(%s) GROUP BY status",
            [[int(r.id) for r in results]],
        )
        states = dict(cursor.fetchall())
    # One drain: each job finished, or, claimed but not yet handed to its thread when
    # the signal came, was given back untouched. None is left held or interrupted.
    assert set(states) <= {"succeeded", "pending"} and sum(states.values()) == 2, states
