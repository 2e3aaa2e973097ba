"""Workflows and batches on the job engine (docs/workflows.md).

A workflow is a DAG of ``@task`` calls written in one transaction; a step starts
when its parents have succeeded, released by the statement that completes the
last of them. A batch is many jobs with callbacks that run exactly once when the
last job ends.
"""

from __future__ import annotations

from .batches import Batch
from .dag import POLICIES, Call, Step, Workflow, call, chain, chord, group
from .results import (
    BatchCounts,
    ParentOutcome,
    WorkflowState,
    batch_counts,
    cancel_workflow,
    get_result,
    get_workflow,
    parent_results,
    parents,
)

__all__ = [
    "POLICIES",
    "Batch",
    "BatchCounts",
    "Call",
    "ParentOutcome",
    "Step",
    "Workflow",
    "WorkflowState",
    "batch_counts",
    "call",
    "cancel_workflow",
    "chain",
    "chord",
    "get_result",
    "get_workflow",
    "group",
    "parent_results",
    "parents",
]
