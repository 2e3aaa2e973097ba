"""Job history: finished jobs leave ``pgqueue_job`` for a partitioned table.

Online: this migration only creates the (empty) partitioned table and, without
blocking writes, the live table's index of finished rows (``CREATE INDEX
CONCURRENTLY``, so the migration is not atomic). No row moves here: the workers'
maintenance moves finished rows in small batches afterwards (docs/operations.md,
"History and retention", which also describes the rollback).

The history is partitioned by state (LIST), so each state's retention drops its own
partitions, then by day of ``finished_at`` (RANGE), created ahead by maintenance.
There is deliberately no DEFAULT partition: see the same page.
"""

import django.utils.timezone
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

# The table has the live table's columns (same order, so a rollback can copy rows
# back with ``SELECT *``), without its identity, and a finish time on every row.
CREATE_HISTORY = """
BEGIN;
CREATE TABLE pgqueue_job_history (LIKE pgqueue_job INCLUDING DEFAULTS)
    PARTITION BY LIST (status);
ALTER TABLE pgqueue_job_history ALTER COLUMN finished_at SET NOT NULL;
ALTER TABLE pgqueue_job_history ADD PRIMARY KEY (id, status, finished_at);
CREATE TABLE pgqueue_job_history_succeeded PARTITION OF pgqueue_job_history
    FOR VALUES IN ('succeeded') PARTITION BY RANGE (finished_at);
CREATE TABLE pgqueue_job_history_dead PARTITION OF pgqueue_job_history
    FOR VALUES IN ('dead') PARTITION BY RANGE (finished_at);
CREATE TABLE pgqueue_job_history_cancelled PARTITION OF pgqueue_job_history
    FOR VALUES IN ('cancelled') PARTITION BY RANGE (finished_at);
COMMIT;
"""

# Back to one table: every history row returns to pgqueue_job, in one transaction.
# Stop the workers first (docs/operations.md, "Rolling back").
ROLLBACK_HISTORY = """
BEGIN;
INSERT INTO pgqueue_job SELECT * FROM pgqueue_job_history;
DROP TABLE pgqueue_job_history CASCADE;
COMMIT;
"""


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("django_pgqueue", "0021_workflows"),
    ]

    operations = [
        migrations.RunSQL(CREATE_HISTORY, ROLLBACK_HISTORY),
        migrations.CreateModel(
            name="JobHistory",
            fields=[
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("in_progress", "In progress"),
                            ("succeeded", "Succeeded"),
                            ("failed", "Failed, retry scheduled"),
                            ("dead", "Dead (DLQ)"),
                            ("cancelled", "Cancelled"),
                        ],
                        default="pending",
                        max_length=16,
                    ),
                ),
                (
                    "attempts",
                    models.PositiveIntegerField(
                        default=0, help_text="Claims so far; counted when a worker claims the row."
                    ),
                ),
                ("max_attempts", models.PositiveIntegerField(default=5)),
                (
                    "next_attempt_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now,
                        help_text="Earliest time the row may be claimed (run_after, or the retry time).",
                    ),
                ),
                (
                    "locked_by",
                    models.UUIDField(
                        blank=True,
                        editable=False,
                        help_text="Fencing token of the most recent claim.",
                        null=True,
                    ),
                ),
                (
                    "locked_until",
                    models.DateTimeField(
                        blank=True,
                        editable=False,
                        help_text="Lease expiry (database clock).",
                        null=True,
                    ),
                ),
                (
                    "worker_id",
                    models.CharField(
                        blank=True,
                        default="",
                        help_text="Worker of the most recent claim.",
                        max_length=128,
                    ),
                ),
                ("last_error", models.TextField(blank=True, default="")),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                ("started_at", models.DateTimeField(blank=True, editable=False, null=True)),
                ("last_attempted_at", models.DateTimeField(blank=True, editable=False, null=True)),
                (
                    "updated_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                (
                    "task_path",
                    models.CharField(help_text="Import path of the Task object.", max_length=255),
                ),
                ("priority", models.SmallIntegerField(default=0, help_text="Higher runs first.")),
                (
                    "errors",
                    models.JSONField(
                        blank=True,
                        default=list,
                        help_text="One entry per failed attempt, oldest first.",
                    ),
                ),
                ("queue_name", models.CharField(default="default", max_length=100)),
                ("backend", models.CharField(default="default", max_length=100)),
                ("args", models.JSONField(blank=True, default=list)),
                ("kwargs", models.JSONField(blank=True, default=dict)),
                ("result", models.JSONField(blank=True, null=True)),
                ("trace_context", models.JSONField(blank=True, editable=False, null=True)),
                (
                    "worker_ids",
                    models.JSONField(
                        blank=True, default=list, help_text="Worker of each attempt, in order."
                    ),
                ),
                (
                    "unique_key",
                    models.CharField(
                        blank=True,
                        db_default=None,
                        help_text="At most one live job per task and key (unique tasks).",
                        max_length=255,
                        null=True,
                    ),
                ),
                (
                    "atomic",
                    models.BooleanField(
                        db_default=False,
                        default=False,
                        help_text="Claimed, run and completed in one transaction (atomic tasks).",
                    ),
                ),
                (
                    "concurrency_key",
                    models.CharField(
                        blank=True,
                        db_default=None,
                        help_text="The key this job's queue limits per key (queues.configure(key_concurrency=)).",
                        max_length=200,
                        null=True,
                    ),
                ),
                (
                    "abort_requested_at",
                    models.DateTimeField(
                        blank=True,
                        editable=False,
                        help_text="When an operator asked to abort the running attempt; its worker then records it as cancelled.",
                        null=True,
                    ),
                ),
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                (
                    "finished_at",
                    models.DateTimeField(
                        help_text="When the job finished (its last change, for a job that never ran)."
                    ),
                ),
            ],
            options={
                "verbose_name": "finished job (history)",
                "verbose_name_plural": "finished jobs (history)",
                "db_table": "pgqueue_job_history",
                "managed": False,
                "default_permissions": ("view",),
            },
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("status__in", ["succeeded", "dead", "cancelled"])),
                fields=["updated_at"],
                name="pgq_job_finished_idx",
            ),
        ),
    ]
