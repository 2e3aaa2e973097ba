"""Workflows and batches on the real queue: release order, results downstream,
failure policies, cancel, retry, and what enqueue refuses (docs/workflows.md)."""

from __future__ import annotations

import pytest
from django.db import connection

from django_pgqueue import operations
from django_pgqueue.exceptions import InvalidWorkflow
from django_pgqueue.models import Job, WorkflowEdge
from django_pgqueue.models import Workflow as WorkflowRow
from django_pgqueue.testing import run_queued_jobs
from django_pgqueue.workflows import (
    Batch,
    Workflow,
    call,
    cancel_workflow,
    chain,
    chord,
    get_result,
    get_workflow,
    group,
)
from testproject.demo import tasks
from testproject.demo.models import TaskRun

pytestmark = pytest.mark.django_db(transaction=True)


def _labels() -> list[str]:
    return list(TaskRun.objects.order_by("id").values_list("label", flat=True))


def _status(step) -> str:
    return Job.objects.get(pk=step.id).status


def test_a_diamond_runs_each_step_once_after_its_parents():
    wf = Workflow("order-42")
    fetch = wf.add(tasks.record_step, "fetch", step_name="fetch")
    charge = wf.add(tasks.record_plain_step, "charge", after=[fetch], step_name="charge")
    audit = wf.add(tasks.record_step, "audit", after=[fetch], step_name="audit")
    receipt = wf.add(tasks.record_step, "receipt", after=[charge, audit], step_name="receipt")
    wf.enqueue()
    assert [_status(s) for s in (fetch, charge, audit, receipt)] == [
        "pending",
        "waiting",
        "waiting",
        "waiting",
    ]
    # Nothing but the root is claimable.
    run_queued_jobs()
    labels = _labels()
    assert sorted(labels) == ["audit", "charge", "fetch", "receipt"]
    assert labels[0] == "fetch" and labels[-1] == "receipt"
    state = get_workflow(wf.id)
    assert state.status == "succeeded" and state.counts == {"succeeded": 4}
    assert get_result(wf.id) == {
        "fetch": "fetch",
        "charge": "charge",
        "audit": "audit",
        "receipt": "receipt",
    }
    assert WorkflowEdge.objects.filter(workflow_id=wf.id, counted=False).count() == 0


def test_results_flow_downstream():
    wf = chord([call(tasks.add, 1, 2), call(tasks.add, 10, 20)], call(tasks.add_parents, 100))
    wf.enqueue()
    run_queued_jobs()
    assert get_result(wf.id)["add_parents-3"] == 133


def test_chain_and_group_shapes():
    c = chain(
        call(tasks.record_step, "a"), call(tasks.record_step, "b"), call(tasks.record_step, "c")
    )
    c.enqueue()
    run_queued_jobs()
    assert _labels() == ["a", "b", "c"]
    g = group(call(tasks.add, 1, 1), call(tasks.add, 2, 2)).enqueue()
    assert {_status(s) for s in g.steps} == {"pending"}


def test_a_failed_step_cancels_its_downstream_by_default():
    wf = Workflow("fails")
    a = wf.add(tasks.record_step, "a")
    b = wf.add(tasks.always_fails, 1, after=[a])
    c = wf.add(tasks.record_step, "c", after=[b])
    d = wf.add(tasks.record_step, "d", after=[c])
    side = wf.add(tasks.record_step, "side", after=[a])
    wf.enqueue()
    run_queued_jobs()
    assert [_status(s) for s in (a, b, c, d, side)] == [
        "succeeded",
        "dead",
        "cancelled",
        "cancelled",
        "succeeded",
    ]
    assert Job.objects.get(pk=d.id).last_error == "Cancelled: a parent failed"
    assert sorted(_labels()) == ["a", "side"]
    assert get_workflow(wf.id).status == "failed"


def test_continue_lets_the_downstream_run_and_see_the_failure():
    wf = Workflow("goes-on", on_parent_failure="continue")
    bad = wf.add(tasks.always_fails, 1, step_name="bad")
    good = wf.add(tasks.add, 2, 3, step_name="good")
    wf.add(tasks.add_parents, after=[bad, good], step_name="sum")
    wf.enqueue()
    run_queued_jobs()
    assert get_result(wf.id)["sum"] == 5


def test_a_batch_runs_its_callbacks_once_with_the_counts():
    batch = Batch(
        "import-7",
        on_success=call(tasks.record_batch_counts, "success"),
        on_failure=call(tasks.record_batch_counts, "failure"),
        on_complete=call(tasks.record_batch_counts, "complete"),
    )
    for i in range(5):
        batch.add(tasks.add, i, i)
    batch.add(tasks.always_fails, 9)
    batch.enqueue()
    run_queued_jobs()
    assert sorted(_labels()) == ["complete:6/5/1/0", "failure:6/5/1/0"]
    ok = Batch("all-good", on_success=call(tasks.record_batch_counts, "success"))
    ok.add(tasks.add, 1, 1)
    ok.enqueue()
    run_queued_jobs()
    assert "success:1/1/0/0" in _labels()


def test_cancel_in_the_middle_starts_nothing_afterwards():
    # The steps after the first are on another queue: the drain runs the first only.
    later = tasks.record_step.using(queue_name="later")
    wf = chain(call(tasks.record_step, "0"), *(call(later, str(i)) for i in range(1, 4)))
    wf.enqueue()
    run_queued_jobs(queues=["default"])
    assert [_status(s) for s in wf.steps] == ["succeeded", "pending", "waiting", "waiting"]
    assert cancel_workflow(wf.id) == 3
    run_queued_jobs()
    assert _labels() == ["0"]
    assert [_status(s) for s in wf.steps] == ["succeeded", "cancelled", "cancelled", "cancelled"]
    assert get_workflow(wf.id).status == "cancelled"
    with pytest.raises(LookupError):
        cancel_workflow(10**9)


def test_retrying_a_failed_middle_step_lets_its_downstream_run_once(settings):
    # A fixed backoff: the failed attempt waits for the operator's "Retry now".
    settings.TASKS = {
        "default": {
            **settings.TASKS["default"],
            "OPTIONS": {"BACKOFF": "tests.worker.test_supervision.ten_minutes"},
        }
    }
    wf = Workflow("retry")
    a = wf.add(tasks.record_step, "a")
    b = wf.add(tasks.flaky_charge, 1, fail_times=1, after=[a])
    c = wf.add(tasks.record_step, "c", after=[b])
    wf.enqueue()
    run_queued_jobs(retries="wait")
    assert _status(b) == "failed" and _status(c) == "waiting"
    changed = operations.apply_operation(Job, "retry_now", [b.id])
    assert changed.changed
    run_queued_jobs(retries="wait")
    assert _status(c) == "succeeded"
    assert _labels() == ["a", "c"]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda wf, other: wf.add(tasks.add, 1, 2, after=["nope"]), "unknown step 'nope'"),
        (
            lambda wf, other: wf.add(tasks.add, 1, 2, after=[other.add(tasks.add, 1, 1)]),
            "another workflow",
        ),
        (
            lambda wf, other: (
                wf.add(tasks.add, 1, 1, step_name="x", after=["y"]),
                wf.add(tasks.add, 1, 1, step_name="y", after=["x"]),
            ),
            "has a cycle",
        ),
        (lambda wf, other: wf.add(tasks.add, object(), 1), "Cannot enqueue"),
    ],
)
def test_enqueue_refuses_a_bad_graph_and_writes_nothing(build, message):
    wf, other = Workflow("bad"), Workflow("other")
    wf.add(tasks.add, 0, 0)
    build(wf, other)
    with pytest.raises(Exception, match=message):
        wf.enqueue()
    assert not Job.objects.exists()
    assert not WorkflowRow.objects.exists() and not WorkflowEdge.objects.exists()


def test_names_and_policies_are_checked():
    with pytest.raises(InvalidWorkflow, match="on_parent_failure must be one of"):
        Workflow("x", on_parent_failure="ignore")
    with pytest.raises(InvalidWorkflow, match="has no steps"):
        Workflow("x").enqueue()
    wf = Workflow("x")
    wf.add(tasks.add, 1, 1, step_name="s")
    with pytest.raises(InvalidWorkflow, match="two steps are named 's'"):
        wf.add(tasks.add, 1, 1, step_name="s")


def test_plain_jobs_release_nothing():
    result = tasks.add.enqueue(1, 2)
    run_queued_jobs()
    assert Job.objects.get(pk=int(result.id)).workflow_id is None
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pgqueue_workflow_edge")
        assert cursor.fetchone()[0] == 0
