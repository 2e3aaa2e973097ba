"""What a step reads of its parents, and a workflow's state and results.

Every result is read through the job store's ``read`` (the read behind
``get_result``), one job at a time, never by a query of our own on the job table:
a finished job may be stored elsewhere, and that read is where it is found.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from django.db import transaction

from ..conf import get_settings
from ..jobs import store as job_store
from ..jobs.rows import JobRow
from ..notify import abort_channel, wake_workers
from ..states import TERMINAL, Status
from . import store


def _job_id(context_or_id: Any) -> int:
    result = getattr(context_or_id, "task_result", None)
    return int(result.id if result is not None else context_or_id)


def _decoded(value: Any) -> Any:
    # The job store's read hands jsonb back as text.
    return json.loads(value) if isinstance(value, str | bytes) else value


@dataclasses.dataclass(frozen=True, slots=True)
class ParentOutcome:
    """How one parent of a step ended: its step name, state and return value."""

    id: int
    name: str
    status: str
    result: Any


def parents(context: Any) -> list[ParentOutcome]:
    """The parents of the running step (its task context, or a job id), in the order
    ``after=`` gave them, with their states and return values."""
    db = get_settings().DATABASE
    out = []
    for parent_id in store.parent_ids(db, _job_id(context)):
        row = job_store.read(db, parent_id)
        if row is None:  # pruned: retention removed it
            continue
        out.append(ParentOutcome(row.id, row.step_name or "", row.status, _decoded(row.result)))
    return out


def parent_results(context: Any) -> dict[str, Any]:
    """The return values of the running step's parents that succeeded, by step name."""
    return {p.name: p.result for p in parents(context) if p.status == Status.SUCCEEDED}


@dataclasses.dataclass(frozen=True, slots=True)
class BatchCounts:
    """How the jobs of a batch ended, as its callback sees them."""

    total: int
    succeeded: int
    failed: int  #: dead (attempts exhausted)
    cancelled: int


def batch_counts(context: Any) -> BatchCounts:
    """The counts of the batch whose callback is running (its task context)."""
    states = [p.status for p in parents(context)]
    return BatchCounts(
        total=len(states),
        succeeded=states.count(Status.SUCCEEDED),
        failed=states.count(Status.DEAD),
        cancelled=states.count(Status.CANCELLED),
    )


@dataclasses.dataclass(frozen=True, slots=True)
class WorkflowState:
    """A workflow as ``get_workflow`` reports it."""

    id: int
    name: str
    kind: str
    #: ``running`` while a step has not ended, else ``succeeded`` (every step did),
    #: ``cancelled`` (an operator cancelled it) or ``failed``.
    status: str
    steps: list[store.StepRow]
    edges: list[tuple[int, int]]
    counts: dict[str, int]

    def results(self) -> dict[str, Any]:
        """Each succeeded step's return value, by step name (read per step through
        the job store, as ``get_result`` does)."""
        db = get_settings().DATABASE
        out = {}
        for step in self.steps:
            if step.status == Status.SUCCEEDED:
                row: JobRow | None = job_store.read(db, step.id)
                if row is not None:
                    out[step.name] = _decoded(row.result)
        return out


def get_workflow(workflow_id: int) -> WorkflowState | None:
    """A workflow's state, steps and edges, or None when there is no such workflow."""
    db = get_settings().DATABASE
    row = store.read_workflow(db, workflow_id)
    if row is None:
        return None
    steps = store.read_steps(db, workflow_id)
    counts: dict[str, int] = {}
    for step in steps:
        counts[step.status] = counts.get(step.status, 0) + 1
    if any(step.status not in TERMINAL for step in steps):
        status = "running"
    elif row.cancelled_at is not None:
        status = "cancelled"
    elif all(step.status == Status.SUCCEEDED for step in steps):
        status = "succeeded"
    else:
        status = "failed"
    return WorkflowState(
        row.id, row.name, row.kind, status, steps, store.read_edges(db, workflow_id), counts
    )


def get_result(workflow_id: int) -> dict[str, Any]:
    """The return values of a workflow's succeeded steps, by step name."""
    state = get_workflow(workflow_id)
    if state is None:
        raise LookupError(f"there is no workflow #{workflow_id}")
    return state.results()


def cancel_workflow(workflow_id: int) -> int:
    """Cancel a workflow: no step starts afterwards (a running one is asked to abort).
    Returns how many steps changed; raises LookupError for an unknown workflow."""
    db = get_settings().DATABASE
    with transaction.atomic(using=db):
        changed = store.cancel(db, workflow_id)
        if changed is None:
            raise LookupError(f"there is no workflow #{workflow_id}")
        if any(status == Status.IN_PROGRESS for _, status in changed):
            wake_workers(db, channel=abort_channel())
    return len(changed)
