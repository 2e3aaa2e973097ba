"""The queue row lifecycle shared by jobs and webhook deliveries, and the Job table."""

from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

# Declared in states.py (importable without the app registry, for sql/).
from ..states import CLAIMABLE, LIVE, TERMINAL, Status
from .expressions import LeaseIffRunning, OneOf
from .fields import StoredJSONField
from .flow import CONCURRENCY_KEY_MAX_LENGTH

__all__ = ["CLAIMABLE", "LIVE", "TERMINAL", "UNIQUE_KEY_MAX_LENGTH", "Status"]

#: Longest unique key (the column's length).
UNIQUE_KEY_MAX_LENGTH = 255


def queue_row_constraints(prefix: str) -> list[models.BaseConstraint]:
    """CHECK constraints that keep a queue table's state machine honest.

    ``locked_by`` keeps the token of the most recent claim after the row leaves
    ``in_progress`` (so a worker can recognise its own write after an ambiguous
    commit); ``locked_until`` is set exactly while a worker holds the row.

    PostgreSQL prepares every CHECK again at each statement that writes a row, so
    each is written in its cheapest shape (``expressions.py``); ``attempts`` and
    ``max_attempts`` are plain integer columns because ``attempts_range`` holds
    their range, and a ``PositiveIntegerField`` would add a CHECK of its own.
    """
    return [
        models.CheckConstraint(
            condition=OneOf("status", [s.value for s in Status]),
            name=f"{prefix}_status_valid",
        ),
        models.CheckConstraint(
            condition=LeaseIffRunning(Status.IN_PROGRESS.value),
            name=f"{prefix}_lease_iff_running",
        ),
        models.CheckConstraint(
            condition=Q(attempts__gte=0) & Q(max_attempts__gte=1),
            name=f"{prefix}_attempts_range",
        ),
        models.CheckConstraint(
            condition=~Q(status=Status.SUCCEEDED) | Q(finished_at__isnull=False),
            name=f"{prefix}_finished_has_time",
        ),
    ]


def queue_row_indexes(prefix: str, *due_fields: str) -> list[models.Index]:
    """The two partial indexes the claim statement reads.

    Terminal rows fall out of both, so the claim cost follows outstanding work,
    not history (see sql.CLAIM_JOBS).
    """
    return [
        models.Index(
            fields=list(due_fields),
            name=f"{prefix}_due_idx",
            condition=Q(status__in=[s.value for s in CLAIMABLE]),
        ),
        models.Index(
            fields=["locked_until"],
            name=f"{prefix}_lease_idx",
            condition=Q(status=Status.IN_PROGRESS),
        ),
    ]


class QueueRow(models.Model):
    """Abstract lifecycle of anything a worker claims, runs and completes.

    Only what every kind of row uses: a job's ``priority`` and ``errors`` history
    are the Job's own (a delivery's history is its attempt log).
    """

    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.PENDING, db_index=False
    )
    # Plain integers: ``attempts_range`` holds their range (queue_row_constraints).
    attempts = models.IntegerField(
        default=0,
        validators=[MinValueValidator(0)],
        help_text=_("Claims so far; counted when a worker claims the row."),
    )
    max_attempts = models.IntegerField(default=5, validators=[MinValueValidator(1)])
    next_attempt_at = models.DateTimeField(
        default=timezone.now,
        help_text=_("Earliest time the row may be claimed (run_after, or the retry time)."),
    )
    locked_by = models.UUIDField(
        null=True,
        blank=True,
        editable=False,
        help_text=_("Fencing token of the most recent claim."),
    )
    locked_until = models.DateTimeField(
        null=True, blank=True, editable=False, help_text=_("Lease expiry (database clock).")
    )
    worker_id = models.CharField(
        max_length=128, blank=True, default="", help_text=_("Worker of the most recent claim.")
    )
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    started_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_attempted_at = models.DateTimeField(null=True, blank=True, editable=False)
    finished_at = models.DateTimeField(null=True, blank=True, editable=False)
    updated_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        abstract = True


class JobColumns(QueueRow):
    """The columns of a job, shared by the live table and its history."""

    task_path = models.CharField(max_length=255, help_text=_("Import path of the Task object."))
    priority = models.SmallIntegerField(default=0, help_text=_("Higher runs first."))
    errors = StoredJSONField(
        default=list, blank=True, help_text=_("One entry per failed attempt, oldest first.")
    )
    queue_name = models.CharField(max_length=100, default="default")
    backend = models.CharField(max_length=100, default="default")
    args = StoredJSONField(default=list, blank=True)
    kwargs = StoredJSONField(default=dict, blank=True)
    result = StoredJSONField(null=True, blank=True)
    #: W3C trace context of the enqueue span (``PGQUEUE["TRACING"]``); the run continues it.
    trace_context = models.JSONField(null=True, blank=True, editable=False)
    worker_ids = StoredJSONField(
        default=list, blank=True, help_text=_("Worker of each attempt, in order.")
    )
    # Both columns have a database default, so the enqueue statements that do
    # not name them (and rows written before they existed) stay valid.
    unique_key = models.CharField(  # noqa: DJ001 - NULL is "not unique"; "" is refused
        max_length=UNIQUE_KEY_MAX_LENGTH,
        null=True,
        blank=True,
        db_default=None,
        help_text=_("At most one live job per task and key (unique tasks)."),
    )
    atomic = models.BooleanField(
        default=False,
        db_default=False,
        help_text=_("Claimed, run and completed in one transaction (atomic tasks)."),
    )
    concurrency_key = models.CharField(  # noqa: DJ001 - NULL is "no key"; "" is refused
        max_length=CONCURRENCY_KEY_MAX_LENGTH,
        null=True,
        blank=True,
        db_default=None,
        help_text=_(
            "The key this job's queue limits per key (queues.configure(key_concurrency=))."
        ),
    )
    # Whether the job's queue had a row (limits or a pause) when the job was
    # written: the flow claim reads only marked jobs, through its own index
    # (pgq_job_flow_due_idx), so jobs of queues without limits never pay for that
    # index. The claims keep the mark true to the rows (docs/flow-control.md).
    flow_controlled = models.BooleanField(
        default=False,
        db_default=False,
        editable=False,
        help_text=_("Its queue is under flow control (limits or a pause)."),
    )
    abort_requested_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text=_(
            "When an operator asked to abort the running attempt; its worker then "
            "records it as cancelled."
        ),
    )
    # Reported by a running task (``context.set_progress``), throttled by
    # PGQUEUE["PROGRESS_INTERVAL_SECONDS"]; NULL until the task reports any.
    progress = models.FloatField(
        null=True,
        blank=True,
        editable=False,
        db_default=None,
        help_text=_("How far the task says it is, from 0 to 1."),
    )
    progress_message = models.TextField(  # noqa: DJ001 - NULL is "never reported"
        null=True, blank=True, editable=False, db_default=None
    )
    progress_at = models.DateTimeField(null=True, blank=True, editable=False, db_default=None)
    # Workflow steps (docs/workflows.md). NULL on every plain job: the release the
    # completion runs for a step is guarded by ``workflow_id IS NOT NULL`` and costs
    # a plain job nothing. ``pending_parents`` counts the parents that have not
    # ended; the statement that ends the last one releases the step.
    workflow_id = models.BigIntegerField(
        null=True, blank=True, editable=False, help_text=_("The workflow or batch of this step.")
    )
    step_name = models.CharField(  # noqa: DJ001 - NULL: not a workflow step
        max_length=200, null=True, blank=True, editable=False
    )
    step_policy = models.CharField(  # noqa: DJ001 - NULL: not a workflow step
        max_length=16,
        null=True,
        blank=True,
        editable=False,
        help_text=_(
            "What a parent's failure does to this step: cancel, continue or "
            "if_failed (a batch's on_failure callback)."
        ),
    )
    # Plain integers: ``pgq_job_parents_range`` holds their range (Job.Meta).
    pending_parents = models.IntegerField(
        null=True, blank=True, editable=False, help_text=_("Parents that have not ended yet.")
    )
    failed_parents = models.IntegerField(
        null=True, blank=True, editable=False, help_text=_("Parents that ended without success.")
    )

    class Meta:
        abstract = True


class Job(JobColumns):
    """One enqueued task: a row of Django's Tasks framework handled by our backend."""

    class Meta:
        db_table = "pgqueue_job"
        verbose_name = _("job")
        verbose_name_plural = _("jobs")
        indexes = [
            # Only the two partial indexes: every state change of a row touches
            # every index on the table, so each extra index slows the hot path.
            *queue_row_indexes("pgq_job", "-priority", "next_attempt_at", "id"),
            # The atomic claim's own due index: atomic rows are few, and this keeps
            # their claim from walking the (large) shared due index.
            models.Index(
                fields=["-priority", "next_attempt_at", "id"],
                name="pgq_job_atomic_due_idx",
                condition=Q(atomic=True, status__in=[s.value for s in CLAIMABLE]),
            ),
            # Flow control (docs/flow-control.md): the waiting jobs of the
            # flow-controlled queues by key, so the claim walks a limited queue's
            # keys (one descent per key) and takes each key's oldest without
            # reading the rest of the backlog; a job without a key is in key ''.
            # Marked jobs only (``flow_controlled``): the jobs of queues without
            # limits, most of any backlog, never write this index. And the running jobs of one key,
            # so its limit is counted from the rows, never a counter.
            models.Index(
                F("queue_name"),
                Coalesce("concurrency_key", Value("")),
                F("priority").desc(),
                F("next_attempt_at"),
                F("id"),
                name="pgq_job_flow_due_idx",
                condition=Q(status__in=[s.value for s in CLAIMABLE], flow_controlled=True),
            ),
            models.Index(
                fields=["queue_name", "concurrency_key"],
                name="pgq_job_flow_run_idx",
                # Keyed jobs only: a job without a key adds nothing to the claim's
                # cost (a queue's own count reads the lease index).
                condition=Q(status=Status.IN_PROGRESS, concurrency_key__isnull=False),
            ),
            # The history mover's: finished rows by their last change, so each batch
            # reads the oldest finished rows without walking the live backlog.
            models.Index(
                fields=["updated_at"],
                name="pgq_job_finished_idx",
                condition=Q(status__in=[s.value for s in TERMINAL]),
            ),
            # Workflows (docs/workflows.md): the steps of one workflow (its page, its
            # cancel), and the waiting ones apart: a waiting step is in neither due
            # index, so a million of them cost the claim nothing.
            models.Index(
                fields=["workflow_id"],
                name="pgq_job_step_idx",
                condition=Q(workflow_id__isnull=False),
            ),
            models.Index(
                fields=["workflow_id"],
                name="pgq_job_waiting_idx",
                condition=Q(status=Status.WAITING),
            ),
        ]
        constraints = [
            *queue_row_constraints("pgq_job"),
            # A workflow step's counts of its parents (NULL for a plain job).
            models.CheckConstraint(
                condition=Q(pending_parents__gte=0) & Q(failed_parents__gte=0),
                name="pgq_job_parents_range",
            ),
            # The arbiter of unique tasks: concurrent enqueues of one key are
            # settled by this index (INSERT ... ON CONFLICT), never by a read.
            models.UniqueConstraint(
                fields=["task_path", "unique_key"],
                name="pgq_job_unique_live",
                condition=Q(unique_key__isnull=False, status__in=[s.value for s in LIVE]),
            ),
        ]
        # One permission per consequence, not per button (docs/admin.md, "Permissions").
        permissions = [
            ("replay_job", "Can replay jobs or retry them now"),
            ("cancel_job", "Can cancel, abort or dead-letter jobs"),
        ]

    def __str__(self) -> str:
        return f"{self.task_path} #{self.pk} ({self.status})"


class JobHistory(JobColumns):
    """A finished job, moved out of ``pgqueue_job`` by the history mover
    (docs/operations.md, "History and retention").

    The table is partitioned by PostgreSQL (by state, then by day of
    ``finished_at``) and created by its migration, so Django does not manage it.
    Rows only arrive by the mover and leave by retention (a whole partition at a
    time) or by a replay, which puts them back in ``pgqueue_job``.
    """

    id = models.BigIntegerField(primary_key=True)
    finished_at = models.DateTimeField(
        help_text=_("When the job finished (its last change, for a job that never ran).")
    )

    class Meta:
        managed = False
        db_table = "pgqueue_job_history"
        verbose_name = _("finished job (history)")
        verbose_name_plural = _("finished jobs (history)")
        default_permissions = ("view",)

    def __str__(self) -> str:
        return f"{self.task_path} #{self.pk} ({self.status}, history)"
