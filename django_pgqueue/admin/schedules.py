"""Admin for periodic tasks: each schedule with its next and last run; pause and resume.

Schedules are declared in code (``PGQUEUE["SCHEDULE"]``, ``@periodic``), so the
definition is read-only here. Pausing needs ``django_pgqueue.pause_schedule``.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from ..models.schedule import Schedule
from ..periodic.store import set_paused
from .audit import log_changes, report
from .display import json_display, when_display


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "task",
        "cron",
        "timezone",
        "paused_display",
        "next_run",
        "last_run",
        "last_job",
        "catch_up",
        "origin",
    )
    list_filter = ("paused", "origin", "catch_up")
    search_fields = ("name", "task_path")
    actions = ("pause", "resume")
    fields = (
        "name",
        "task_path",
        "cron",
        "timezone",
        "queue_name",
        "args_json",
        "kwargs_json",
        "catch_up",
        "origin",
        "paused",
        "next_tick_at",
        "last_tick_at",
        "last_job",
        "declared_at",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields

    args_json = json_display("args", _("arguments"))
    kwargs_json = json_display("kwargs", _("keyword arguments"))
    next_run = when_display("next_tick_at", _("next run"))
    last_run = when_display("last_tick_at", _("last run"))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # declared in code or settings

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # read-only detail; pausing is an action

    def has_pause_permission(self, request: HttpRequest) -> bool:
        opts = self.model._meta
        return request.user.has_perm(f"{opts.app_label}.pause_schedule")

    @admin.display(description=_("task"), ordering="task_path")
    def task(self, obj: Schedule) -> str:
        return obj.task_path.rsplit(".", 1)[-1]

    @admin.display(description=_("paused"), boolean=True, ordering="paused")
    def paused_display(self, obj: Schedule) -> bool:
        return obj.paused

    @admin.display(description=_("last job"))
    def last_job(self, obj: Schedule) -> str:
        if obj.last_job_id is None:
            return "-"
        url = reverse("admin:django_pgqueue_job_change", args=[obj.last_job_id])
        return format_html('<a href="{}">#{}</a>', url, obj.last_job_id)

    def _set_paused(self, request: HttpRequest, queryset: QuerySet, paused: bool) -> None:
        changed, skipped = set_paused(queryset.values_list("pk", flat=True), paused)
        verb = "Paused" if paused else "Resumed"
        log_changes(request, Schedule, dict.fromkeys(changed, f"{verb} the schedule"))
        report(self, request, verb, changed, skipped)

    @admin.action(description=_("Pause the selected schedules"), permissions=["pause"])
    def pause(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_paused(request, queryset, True)

    @admin.action(description=_("Resume the selected schedules"), permissions=["pause"])
    def resume(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_paused(request, queryset, False)
