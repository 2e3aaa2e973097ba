"""Workflows and batches: the workflow row and the edges between its steps.

A step is a job (``pgqueue_job``, with ``workflow_id``); what a workflow adds is
its own row (name, kind, when it was cancelled) and one edge per (parent, child).
An edge is ``counted`` once its parent has ended: the completion that ends a parent
marks its edges and takes them off the children's ``pending_parents`` in the same
statement, so each edge is counted exactly once whatever crashes or replays
(``sql/workflows.py``).
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class WorkflowKind(models.TextChoices):
    WORKFLOW = "workflow", _("Workflow")
    BATCH = "batch", _("Batch")


class Workflow(models.Model):
    """A DAG of jobs enqueued in one transaction (or a batch with its callbacks)."""

    name = models.CharField(max_length=200)
    kind = models.CharField(
        max_length=16, choices=WorkflowKind.choices, default=WorkflowKind.WORKFLOW
    )
    step_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    cancelled_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        db_table = "pgqueue_workflow"
        verbose_name = _("workflow")
        verbose_name_plural = _("workflows")
        permissions = [("cancel_workflow", "Can cancel workflows or retry their steps")]

    def __str__(self) -> str:
        return f"{self.name} #{self.pk}"


class WorkflowEdge(models.Model):
    """Step ``child_id`` waits for step ``parent_id`` (both job ids)."""

    workflow_id = models.BigIntegerField()
    parent_id = models.BigIntegerField()
    child_id = models.BigIntegerField()
    counted = models.BooleanField(default=False, db_default=False)

    class Meta:
        db_table = "pgqueue_workflow_edge"
        indexes = [
            # The completion finds a parent's edges by this index.
            models.Index(fields=["parent_id"], name="pgq_edge_parent_idx"),
            # A step's parents (its results, the admin graph).
            models.Index(fields=["child_id"], name="pgq_edge_child_idx"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["parent_id", "child_id"], name="pgq_edge_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.parent_id} -> {self.child_id}"
