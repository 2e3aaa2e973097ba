"""Batches: many jobs, and callbacks that run exactly once when the last one ends.

A batch is a workflow whose jobs have no parents and whose callbacks wait for all
of them: ``on_success`` with the ``cancel`` policy (it runs only if every job
succeeded), ``on_failure`` with ``if_failed`` (only if one did not) and
``on_complete`` with ``continue`` (always). The completion of the last job
releases them, exactly once (sql/workflows.py). A callback reads the counts with
``batch_counts(context)``.
"""

from __future__ import annotations

from typing import Any

from ..compat import Task
from ..exceptions import InvalidWorkflow
from ..models.workflows import WorkflowKind
from .dag import Call, Step, Workflow


class Batch(Workflow):
    """``Batch("import-7", on_complete=call(report, 7))``; ``add`` jobs, ``enqueue``."""

    kind = WorkflowKind.BATCH

    def __init__(
        self,
        name: str,
        *,
        on_success: Call | Task | None = None,
        on_failure: Call | Task | None = None,
        on_complete: Call | Task | None = None,
    ) -> None:
        super().__init__(name, on_parent_failure="continue")
        self.callbacks = {
            "on_success": (on_success, "cancel"),
            "on_failure": (on_failure, "if_failed"),
            "on_complete": (on_complete, "continue"),
        }
        self.jobs: list[Step] = []

    def add(self, task: Task | Call, *args: Any, **kwargs: Any) -> Step:
        """Add one job of the batch (jobs of a batch do not wait for each other)."""
        if self.id is not None:
            raise InvalidWorkflow(f"batch {self.name!r} was enqueued already")
        step = super().add(task, *args, step_name=f"job-{len(self.jobs) + 1}", **kwargs)
        self.jobs.append(step)
        return step

    def enqueue(self) -> Batch:
        """Write the batch's jobs and callbacks in the caller's transaction."""
        if not self.jobs:
            raise InvalidWorkflow(f"batch {self.name!r} has no jobs")
        for name, (callback, policy) in self.callbacks.items():
            if callback is None:
                continue
            the_call = callback if isinstance(callback, Call) else Call(callback)
            Workflow.add(self, the_call, after=self.jobs, step_name=name, on_parent_failure=policy)
        super().enqueue()
        return self
