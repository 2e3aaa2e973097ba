"""The workflow store: the one writer of ``pgqueue_workflow`` and
``pgqueue_workflow_edge`` rows, and the reads that show a workflow.

A step is a job, and its row is the job store's (``jobs/store.py``): this store
writes the workflow's own row and its edges, and asks the job store for the
steps' rows. After birth an edge changes only in the completion that ends its
parent (``sql/workflows.py``, ``release``, which the job store runs).
The statements are in ``sql/workflows.py``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Sequence
from typing import Any

from django.db import connections

from .. import sql
from ..jobs import store as job_store


def insert(
    db: str,
    name: str,
    kind: str,
    steps: Sequence[job_store.NewStep],
    edges: Sequence[tuple[int, int]],
) -> tuple[int, list[int]]:
    """Write a workflow in the caller's transaction: its row, its steps (the job store
    writes them, in one statement) and its edges (``(parent, child)`` positions in
    ``steps``); return the workflow's id and the steps' job ids. Four statements,
    whatever the size."""
    with connections[db].cursor() as cursor:
        cursor.execute(sql.INSERT_WORKFLOW, [name, kind, len(steps)])
        workflow_id = int(cursor.fetchone()[0])
    ids = job_store.reserve_ids(db, len(steps))
    job_store.insert_steps(db, workflow_id, ids, steps)
    if edges:
        with connections[db].cursor() as cursor:
            cursor.execute(
                sql.INSERT_EDGES,
                [workflow_id, [ids[p] for p, _ in edges], [ids[c] for _, c in edges]],
            )
    return workflow_id, ids


def parent_ids(db: str, job_id: int) -> list[int]:
    """The job ids of a step's parents, in the order they were given."""
    with connections[db].cursor() as cursor:
        cursor.execute(sql.STEP_PARENTS, [job_id])
        return [row[0] for row in cursor.fetchall()]


@dataclasses.dataclass(frozen=True, slots=True)
class WorkflowRow:
    id: int
    name: str
    kind: str
    step_count: int
    created_at: dt.datetime
    cancelled_at: dt.datetime | None


@dataclasses.dataclass(frozen=True, slots=True)
class StepRow:
    """A step as the workflow's page and status show it (no result: see ``results``)."""

    id: int
    name: str
    task_path: str
    status: str
    policy: str
    pending_parents: int


def read_workflow(db: str, workflow_id: int) -> WorkflowRow | None:
    with connections[db].cursor() as cursor:
        cursor.execute(sql.GET_WORKFLOW, [workflow_id])
        row = cursor.fetchone()
    return None if row is None else WorkflowRow(*row)


def read_steps(db: str, workflow_id: int) -> list[StepRow]:
    with connections[db].cursor() as cursor:
        cursor.execute(sql.WORKFLOW_STEPS, [workflow_id])
        return [StepRow(*row) for row in cursor.fetchall()]


def read_edges(db: str, workflow_id: int) -> list[tuple[int, int]]:
    with connections[db].cursor() as cursor:
        cursor.execute(sql.WORKFLOW_EDGES, [workflow_id])
        return [(row[0], row[1]) for row in cursor.fetchall()]


def cancel(db: str, workflow_id: int) -> list[tuple[int, str]] | None:
    """Cancel a workflow: its row marked, every step not ended cancelled (a running
    one asked to abort), in the caller's transaction. None: no such workflow."""
    with connections[db].cursor() as cursor:
        cursor.execute(sql.MARK_WORKFLOW_CANCELLED, [workflow_id])
        if cursor.fetchone() is None:
            return None
    return job_store.cancel_workflow_steps(db, workflow_id)


def prune(
    conn: Any, age: float, batch_size: int, *, dry_run: bool, pause: float = 0.0
) -> tuple[int, int]:
    """Retention (``pgqueue_prune``): delete, a batch a transaction, the workflows
    older than ``age`` seconds none of whose steps is left in the job table, with
    their edges; return how many of each went (with ``dry_run``: would go).
    ``conn`` is the prune's autocommit connection."""
    if dry_run:
        workflows, edges = conn.execute(
            sql.PRUNE_COUNT_WORKFLOWS, {"age": age, "limit": None}
        ).fetchone()
        return int(workflows), int(edges)
    total_workflows = total_edges = 0
    while True:
        workflows, edges = conn.execute(
            sql.PRUNE_WORKFLOWS, {"age": age, "limit": batch_size}
        ).fetchone()
        total_workflows += int(workflows)
        total_edges += int(edges)
        if workflows < batch_size:
            return total_workflows, total_edges
        if pause:
            time.sleep(pause)
