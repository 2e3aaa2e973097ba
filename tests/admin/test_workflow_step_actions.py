"""An operator ending one workflow step (Cancel, Move to DLQ, Abort) applies the
step's failure to its children as a failed attempt does (docs/workflows.md): the
admin's action and button and the Python operations all go through
``operations.apply_operation``, whose one statement ends the step and releases."""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_pgqueue import operations
from django_pgqueue.models import Job, WorkflowEdge
from django_pgqueue.testing import run_queued_jobs
from django_pgqueue.workflows import Workflow, get_workflow
from testproject.demo import tasks
from testproject.demo.models import TaskRun

from .conftest import csrf_token

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "admin:django_pgqueue_job_changelist"


def _states(steps) -> list[str]:
    rows = dict(Job.objects.filter(pk__in=[s.id for s in steps]).values_list("pk", "status"))
    return [rows[s.id] for s in steps]


def _workflow():
    """A root on its own queue (the drain does not take it) with a ``cancel`` child and
    grandchild and a ``continue`` child."""
    wf = Workflow("operated")
    root = wf.add(tasks.record_step.using(queue_name="held"), "root", step_name="root")
    doomed = wf.add(tasks.record_step, "doomed", after=[root], step_name="doomed")
    below = wf.add(tasks.record_step, "below", after=[doomed], step_name="below")
    goes_on = wf.add(
        tasks.add_parents, after=[root], step_name="goes_on", on_parent_failure="continue"
    )
    wf.enqueue()
    return wf, [root, doomed, below, goes_on]


def _assert_settled(wf, steps, root_state: str) -> None:
    _, doomed, _, goes_on = steps
    assert _states(steps) == [root_state, "cancelled", "cancelled", "pending"]
    assert Job.objects.get(pk=doomed.id).last_error == "Cancelled: a parent failed"
    step = Job.objects.get(pk=goes_on.id)
    assert (step.pending_parents, step.failed_parents) == (0, 1)
    assert not WorkflowEdge.objects.filter(workflow_id=wf.id, counted=False).exists()
    run_queued_jobs(queues=["default"])
    assert _states(steps) == [root_state, "cancelled", "cancelled", "succeeded"]
    assert not TaskRun.objects.exists()  # neither the root nor a cancelled step ran
    assert get_workflow(wf.id).status == "failed"


@pytest.mark.parametrize("operation", ["cancel", "move_to_dlq", "abort"])
def test_the_admin_action_settles_the_children(operation, operator_client):
    wf, steps = _workflow()
    token = csrf_token(operator_client, reverse(CHANGELIST))
    data = {
        "action": operation,
        "_selected_action": [str(steps[0].id)],
        "post": "yes",
        "csrfmiddlewaretoken": token,
    }
    assert operator_client.post(reverse(CHANGELIST), data).status_code == 302
    _assert_settled(wf, steps, "dead" if operation == "move_to_dlq" else "cancelled")


def test_the_admin_button_settles_the_children(operator_client):
    wf, steps = _workflow()
    url = reverse("admin:pgqueue_job_move_to_dlq", args=(steps[0].id,))
    token = csrf_token(operator_client, url)
    assert operator_client.post(url, {"csrfmiddlewaretoken": token}).status_code == 302
    _assert_settled(wf, steps, "dead")


def test_the_python_operations_settle_the_children_once():
    wf, steps = _workflow()
    result = operations.cancel(Job, [steps[0].id])
    assert result.changed == {steps[0].id: "pending"}
    _assert_settled(wf, steps, "cancelled")
    # Cancelled, then to the DLQ: its edges were counted by the first end, not again.
    assert operations.move_to_dlq(Job, [steps[0].id]).changed == {steps[0].id: "cancelled"}
    step = Job.objects.get(pk=steps[3].id)
    assert (step.pending_parents, step.failed_parents) == (0, 1)
