"""A workflow step whose worker is killed on its last attempt (docs/workflows.md).

A real ``runworkers`` process claims a one-attempt step and is killed with SIGKILL
before running it. Its lease lapses; the next claim (another worker process) finds
the step out of attempts and marks it ``dead`` in the claim statement itself. That
end must apply the step's failure policy to its children exactly as a failure
written by a worker does: ``cancel`` children (and theirs) are cancelled,
``continue`` children count the failed edge and run. Nothing stays ``waiting``.
"""

from __future__ import annotations

import dataclasses
import signal

import pytest

from django_pgqueue.workflows import Workflow, get_workflow

from .conftest import worker_env
from .helpers import job, paused_fields, query, wait_terminal

pytestmark = [pytest.mark.fault, pytest.mark.timeout(90), pytest.mark.django_db(transaction=True)]

ONE_AT_A_TIME = ("--concurrency", "1", "--prefetch", "0")


@pytest.mark.parametrize("kind", ["plain", "atomic"])
def test_a_step_dead_in_the_claim_cancels_or_releases_its_children(
    worker_process, test_dsn, summary, kind
):
    from testproject.demo import tasks

    step_task = tasks.record_step if kind == "atomic" else tasks.record_plain_step
    wf = Workflow(f"killed-{kind}")
    root = wf.add(dataclasses.replace(step_task, max_attempts=1), "root", step_name="root")
    doomed = wf.add(tasks.record_step, "doomed", after=[root], step_name="doomed")
    below = wf.add(tasks.record_plain_step, "below", after=[doomed], step_name="below")
    goes_on = wf.add(
        tasks.record_plain_step,
        "goes_on",
        after=[root],
        step_name="goes_on",
        on_parent_failure="continue",
    )
    last = wf.add(tasks.record_step, "last", after=[goes_on], step_name="last")
    wf.enqueue()
    steps = [root, doomed, below, goes_on, last]
    ids = [s.id for s in steps]

    a = worker_process(*ONE_AT_A_TIME, env=worker_env(PGQUEUE_TEST_PAUSE_AT="after_claim"))
    _, paused_id, token = paused_fields(a.wait_line("PAUSED after_claim"))
    assert paused_id == root.id
    a.kill()
    assert a.proc.returncode == -signal.SIGKILL
    assert job(test_dsn, root.id)["status"] == "in_progress"

    b = worker_process(*ONE_AT_A_TIME, env=worker_env())
    book = wait_terminal(test_dsn, ids, timeout=30)
    b.signal(signal.SIGTERM)
    assert b.wait(15) == 0

    states = dict(query(test_dsn, "SELECT id, status FROM pgqueue_job WHERE id = ANY(%s)", [ids]))
    assert [states[i] for i in ids] == ["dead", "cancelled", "cancelled", "succeeded", "succeeded"]
    row = job(test_dsn, root.id)
    assert row["attempts"] == 1 and row["locked_by"] == token
    assert row["errors"][-1]["exception_class_path"] == "django_pgqueue.exceptions.LeaseExpired"
    assert job(test_dsn, doomed.id)["last_error"] == "Cancelled: a parent failed"
    # Each edge counted once, each counter at zero; only the released steps ran.
    assert query(test_dsn, "SELECT count(*) FROM pgqueue_workflow_edge WHERE NOT counted") == [(0,)]
    counters = query(
        test_dsn,
        "SELECT id, pending_parents, failed_parents FROM pgqueue_job WHERE id = ANY(%s)",
        [ids],
    )
    assert {i: (p, f) for i, p, f in counters}[goes_on.id] == (0, 1)
    runs = dict(
        query(test_dsn, "SELECT label, count(*) FROM demo_taskrun GROUP BY label ORDER BY 1")
    )
    # The ``continue`` step ran once and saw its parent's failure (the demo step
    # labels a run whose parents did not all succeed "early:<parents>").
    assert runs == {"early:root": 1, "last": 1}
    assert get_workflow(wf.id).status == "failed"
    assert not book.lost
    summary(
        faults=1,
        tasks=len(ids),
        duplicates=book.duplicates,
        lost=len(book.lost),
        note=f"kill -9 of a one-attempt {kind} step; dead in the claim, children settled",
    )
