"""Periodic schedules and their ticks, unique keys and atomic jobs on the job table."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0005_job_abort_requested_at"),
    ]

    operations = [
        migrations.CreateModel(
            name="Schedule",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=200, unique=True)),
                ("task_path", models.CharField(max_length=255)),
                ("cron", models.CharField(max_length=200)),
                ("timezone", models.CharField(default="UTC", max_length=64)),
                ("args", models.JSONField(blank=True, default=list)),
                ("kwargs", models.JSONField(blank=True, default=dict)),
                ("queue_name", models.CharField(blank=True, default="", max_length=100)),
                (
                    "catch_up",
                    models.CharField(
                        choices=[
                            ("latest", "Run the latest missed tick once"),
                            ("all", "Run every missed tick"),
                            ("none", "Skip missed ticks"),
                        ],
                        default="latest",
                        max_length=8,
                    ),
                ),
                (
                    "origin",
                    models.CharField(
                        default="settings", help_text="settings or decorator", max_length=16
                    ),
                ),
                (
                    "paused",
                    models.BooleanField(
                        default=False,
                        help_text="A paused schedule enqueues nothing; missed ticks are skipped.",
                    ),
                ),
                (
                    "last_tick_at",
                    models.DateTimeField(
                        blank=True, help_text="The latest tick enqueued (or skipped).", null=True
                    ),
                ),
                ("last_job_id", models.BigIntegerField(blank=True, null=True)),
                ("next_tick_at", models.DateTimeField(blank=True, null=True)),
                (
                    "declared_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now,
                        help_text="When a worker last found it in its code or settings.",
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                (
                    "updated_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
            ],
            options={
                "verbose_name": "schedule",
                "verbose_name_plural": "schedules",
                "db_table": "pgqueue_schedule",
                "ordering": ["name"],
                "permissions": [("pause_schedule", "Can pause and resume schedules")],
            },
        ),
        migrations.CreateModel(
            name="ScheduleTick",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("schedule_name", models.CharField(max_length=200)),
                ("tick_at", models.DateTimeField()),
                ("job_id", models.BigIntegerField(blank=True, null=True)),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
            ],
            options={
                "verbose_name": "schedule tick",
                "db_table": "pgqueue_schedule_tick",
            },
        ),
        migrations.AddField(
            model_name="job",
            name="atomic",
            field=models.BooleanField(
                db_default=False,
                default=False,
                help_text="Claimed, run and completed in one transaction (atomic tasks).",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="unique_key",
            field=models.CharField(
                blank=True,
                db_default=None,
                help_text="At most one live job per task and key (unique tasks).",
                max_length=255,
                null=True,
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("atomic", True), ("status__in", ["pending", "failed"])),
                fields=["-priority", "next_attempt_at", "id"],
                name="pgq_job_atomic_due_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                condition=models.Q(
                    ("status__in", ["pending", "in_progress", "failed"]),
                    ("unique_key__isnull", False),
                ),
                fields=("task_path", "unique_key"),
                name="pgq_job_unique_live",
            ),
        ),
        migrations.AddConstraint(
            model_name="scheduletick",
            constraint=models.UniqueConstraint(
                fields=("schedule_name", "tick_at"), name="pgq_tick_once"
            ),
        ),
    ]
