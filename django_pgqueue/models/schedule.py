"""Periodic tasks: one row per declared schedule, and one per tick that ran.

Schedules are declared in code (``PGQUEUE["SCHEDULE"]`` or ``@periodic``); the
``Schedule`` row mirrors the declaration for the admin and keeps what only the
database can know across workers: whether an operator paused it and the last
tick that was enqueued. ``ScheduleTick`` is the arbiter of "exactly one job per
tick": every worker may try to enqueue a tick, and the unique constraint on
(schedule, tick instant) lets exactly one transaction through.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone as django_timezone
from django.utils.translation import gettext_lazy as _


class CatchUp(models.TextChoices):
    """What a schedule does with ticks that passed while no worker ran."""

    LATEST = "latest", _("Run the latest missed tick once")
    ALL = "all", _("Run every missed tick")
    NONE = "none", _("Skip missed ticks")


class Schedule(models.Model):
    """A periodic task as the workers last declared it, plus its runtime state."""

    name = models.CharField(max_length=200, unique=True)
    task_path = models.CharField(max_length=255)
    cron = models.CharField(max_length=200)
    timezone = models.CharField(max_length=64, default="UTC")
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    queue_name = models.CharField(max_length=100, blank=True, default="")
    catch_up = models.CharField(max_length=8, choices=CatchUp.choices, default=CatchUp.LATEST)
    origin = models.CharField(
        max_length=16, default="settings", help_text=_("settings or decorator")
    )
    paused = models.BooleanField(
        default=False, help_text=_("A paused schedule enqueues nothing; missed ticks are skipped.")
    )
    last_tick_at = models.DateTimeField(
        null=True, blank=True, help_text=_("The latest tick enqueued (or skipped).")
    )
    last_job_id = models.BigIntegerField(null=True, blank=True)
    next_tick_at = models.DateTimeField(null=True, blank=True)
    declared_at = models.DateTimeField(
        default=django_timezone.now,
        help_text=_("When a worker last found it in its code or settings."),
    )
    created_at = models.DateTimeField(default=django_timezone.now, editable=False)
    updated_at = models.DateTimeField(default=django_timezone.now, editable=False)

    class Meta:
        db_table = "pgqueue_schedule"
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")
        ordering = ["name"]
        permissions = [
            ("pause_schedule", "Can pause and resume schedules"),
            ("run_schedule", "Can run a schedule now, outside its cron"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.cron})"


class ScheduleTick(models.Model):
    """One tick of one schedule that a worker enqueued (or skipped by policy)."""

    schedule_name = models.CharField(max_length=200)
    tick_at = models.DateTimeField()
    job_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=django_timezone.now, editable=False)

    class Meta:
        db_table = "pgqueue_schedule_tick"
        verbose_name = _("schedule tick")
        constraints = [
            models.UniqueConstraint(fields=["schedule_name", "tick_at"], name="pgq_tick_once"),
        ]

    def __str__(self) -> str:
        return f"{self.schedule_name} @ {self.tick_at:%Y-%m-%d %H:%M:%S%z}"
