"""Replaying a failed workflow step brings back what its failure settled
(docs/workflows.md, "Operators"): the steps it cancelled wait for it again with
the right counters, and its next end releases them once."""

from __future__ import annotations

import pytest

from django_pgqueue import operations
from django_pgqueue.models import Job, WorkflowEdge
from django_pgqueue.testing import run_queued_jobs
from django_pgqueue.workflows import Workflow, get_workflow
from testproject.demo import tasks
from testproject.demo.models import TaskRun

pytestmark = pytest.mark.django_db(transaction=True)

HELD = tasks.record_step.using(queue_name="held")


def _rows(steps) -> list[tuple[str, int, int]]:
    rows = {
        j.pk: (j.status, j.pending_parents, j.failed_parents)
        for j in Job.objects.filter(pk__in=[s.id for s in steps])
    }
    return [rows[s.id] for s in steps]


def _text(steps) -> str:
    return ", ".join(" ".join(map(str, row)) for row in _rows(steps))


def test_replaying_a_dead_step_brings_back_its_cancelled_downstream():
    wf = Workflow("replayed")
    root = wf.add(HELD, "root", step_name="root")
    other = wf.add(HELD, "other", step_name="other")
    doomed = wf.add(tasks.record_step, "doomed", after=[root], step_name="doomed")
    below = wf.add(tasks.record_step, "below", after=[doomed], step_name="below")
    goes_on = wf.add(
        tasks.record_step,
        "goes_on",
        after=[root, other],
        step_name="goes_on",
        on_parent_failure="continue",
    )
    wf.enqueue()
    steps = [root, other, doomed, below, goes_on]
    operations.move_to_dlq(Job, [root.id])
    # (state, pending_parents, failed_parents) of each step
    assert _text(steps) == "dead 0 0, pending 0 0, cancelled 0 1, cancelled 0 1, waiting 1 1"

    assert operations.replay(Job, [root.id]).changed == {root.id: "dead"}
    assert _text(steps) == "pending 0 0, pending 0 0, waiting 1 0, waiting 1 0, waiting 2 0"
    assert Job.objects.get(pk=doomed.id).last_error == ""
    assert WorkflowEdge.objects.filter(workflow_id=wf.id, counted=False).count() == 4

    run_queued_jobs()
    assert [s for s, _, _ in _rows(steps)] == ["succeeded"] * 5
    labels = sorted(TaskRun.objects.values_list("label", flat=True))
    assert labels == ["below", "doomed", "goes_on", "other", "root"]  # once each, none early
    assert get_workflow(wf.id).status == "succeeded"
    assert not WorkflowEdge.objects.filter(workflow_id=wf.id, counted=False).exists()


def test_a_replayed_step_that_fails_again_cancels_again_once():
    wf = Workflow("fails-twice")
    root = wf.add(tasks.always_fails, 1, step_name="root")
    child = wf.add(tasks.record_step, "child", after=[root], step_name="child")
    wf.enqueue()
    run_queued_jobs()
    assert _rows([root, child]) == [("dead", 0, 0), ("cancelled", 0, 1)]
    operations.replay(Job, [root.id])
    assert _rows([child]) == [("waiting", 1, 0)]
    run_queued_jobs()
    assert [row[0] for row in _rows([root, child])] == ["dead", "cancelled"]
    assert _rows([child]) == [("cancelled", 0, 1)]
    assert not WorkflowEdge.objects.filter(workflow_id=wf.id, counted=False).exists()
    assert not TaskRun.objects.exists()


def test_a_step_with_another_failed_parent_stays_cancelled_until_both_are_replayed():
    wf = Workflow("two-failed")
    a = wf.add(HELD, "a", step_name="a")
    b = wf.add(HELD, "b", step_name="b")
    child = wf.add(tasks.record_step, "child", after=[a, b], step_name="child")
    wf.enqueue()
    operations.move_to_dlq(Job, [a.id])
    operations.move_to_dlq(Job, [b.id])  # the child is cancelled already
    assert _rows([child]) == [("cancelled", 1, 1)]
    operations.replay(Job, [a.id])  # b's failure still holds it
    assert _rows([child]) == [("cancelled", 1, 1)]
    run_queued_jobs()
    assert [row[0] for row in _rows([a, b, child])] == ["succeeded", "dead", "cancelled"]
    operations.replay(Job, [b.id])
    assert _rows([child]) == [("waiting", 1, 0)]
    run_queued_jobs()
    assert [row[0] for row in _rows([a, b, child])] == ["succeeded"] * 3
