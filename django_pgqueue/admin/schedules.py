"""Admin for periodic tasks: each schedule with its next and last run, its next five
runs; pause, resume and run now.

Schedules are declared in code (``PGQUEUE["SCHEDULE"]``, ``@periodic``), so the
definition is read-only here. Pausing needs ``django_pgqueue.pause_schedule``;
running one now (an action, so a POST with CSRF, also offered as a button on the
schedule's page) needs ``django_pgqueue.run_schedule``.
"""

from __future__ import annotations

from itertools import islice
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import ImproperlyConfigured
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join, strip_tags
from django.utils.translation import gettext_lazy as _

from ..exceptions import NotATask
from ..models.queue import Job
from ..models.schedule import Schedule, ScheduleTick
from ..periodic import cron, store
from ..periodic.scheduler import run_now
from .audit import log_changes, report
from .charts import sparkline
from .display import WhenDatesMixin, json_display, when

#: How many upcoming runs the schedule's page lists.
NEXT_RUNS = 5
#: Ticks drawn in a schedule's sparkline of recent runs.
RECENT_RUNS = 20


@admin.register(Schedule)
class ScheduleAdmin(WhenDatesMixin, admin.ModelAdmin):
    list_display = (
        "name",
        "task",
        "cron",
        "timezone",
        "paused_display",
        "next_tick_at",
        "last_tick_at",
        "last_job",
        "recent_runs",
        "catch_up",
        "origin",
    )
    list_filter = ("paused", "origin", "catch_up")
    search_fields = ("name", "task_path")
    actions = ("pause", "resume", "run_now")
    change_form_template = "admin/django_pgqueue/schedule/change_form.html"
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
        "next_runs",
        "recent_runs",
        "last_tick_at",
        "last_job",
        "declared_at",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields

    args_json = json_display("args", _("arguments"))
    kwargs_json = json_display("kwargs", _("keyword arguments"))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # declared in code or settings

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # read-only detail; pausing is an action

    def has_pause_permission(self, request: HttpRequest) -> bool:
        opts = self.model._meta
        return request.user.has_perm(f"{opts.app_label}.pause_schedule")

    # Deleting goes through the schedule store, the rows' one writer.
    def delete_model(self, request: HttpRequest, obj: Schedule) -> None:
        store.delete([obj.pk])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        store.delete(queryset.values_list("pk", flat=True))

    def has_run_permission(self, request: HttpRequest) -> bool:
        opts = self.model._meta
        return request.user.has_perm(f"{opts.app_label}.run_schedule")

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        context["can_run_now"] = self.has_run_permission(request)
        return super().render_change_form(request, context, add, change, form_url, obj)

    @admin.display(description=_("next runs"))
    def next_runs(self, obj: Schedule):
        """The next five runs of the cron, in UTC and in the schedule's time zone
        (where a daylight-saving change shows); a paused schedule says so first."""
        ticks = list(islice(cron.ticks_after(obj.cron, obj.timezone, timezone.now()), NEXT_RUNS))
        items = format_html_join(
            "",
            '<li>{} <span class="pgq-muted">({} {})</span></li>',
            (
                (when(t), t.astimezone(cron.zone(obj.timezone)).strftime("%H:%M"), obj.timezone)
                for t in ticks
            ),
        )
        note = (
            format_html("<p>{}</p>", _("Paused: these ticks will be skipped."))
            if obj.paused
            else ""
        )
        return format_html('{}<ol class="pgq-next-runs">{}</ol>', note, items)

    @admin.display(description=_("recent runs"))
    def recent_runs(self, obj: Schedule) -> str:
        """A sparkline of the last RECENT_RUNS ticks, oldest first, each drawn by its
        job's outcome (a tick whose job was pruned shows as "pruned")."""
        ticks = list(
            ScheduleTick.objects.filter(schedule_name=obj.name)
            .order_by("-tick_at")
            .values_list("tick_at", "job_id")[:RECENT_RUNS]
        )
        ids = [job_id for _, job_id in ticks if job_id is not None]
        status = dict(Job.objects.filter(id__in=ids).values_list("id", "status")) if ids else {}
        runs = [
            (status.get(job_id or 0, "pruned"), strip_tags(when(tick_at)))
            for tick_at, job_id in reversed(ticks)
        ]
        if not runs:
            return format_html('<span class="pgq-muted">{}</span>', _("no runs yet"))
        return sparkline(
            _("Last %(n)d runs of %(name)s") % {"n": len(runs), "name": obj.name}, runs
        )

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
        changed, skipped = store.set_paused(queryset.values_list("pk", flat=True), paused)
        verb = "Paused" if paused else "Resumed"
        log_changes(request, Schedule, dict.fromkeys(changed, f"{verb} the schedule"))
        report(self, request, verb, changed, skipped)

    @admin.action(description=_("Pause the selected schedules"), permissions=["pause"])
    def pause(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_paused(request, queryset, True)

    @admin.action(description=_("Resume the selected schedules"), permissions=["pause"])
    def resume(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_paused(request, queryset, False)

    @admin.action(description=_("Run the selected schedules now"), permissions=["run"])
    def run_now(self, request: HttpRequest, queryset: QuerySet) -> None:
        """One extra run of each (its cron runs stay as they are), on the record."""
        for pk in queryset.values_list("pk", flat=True):
            try:
                name, job_id = run_now(pk)
            except Schedule.DoesNotExist:
                self.message_user(
                    request, f"Skipped schedule {pk}: deleted meanwhile.", messages.WARNING
                )
                continue
            except (ImproperlyConfigured, ImportError, NotATask) as exc:
                # A row changed past the checks a schedule is declared by: said, and
                # the other selected schedules still run.
                broken = Schedule.objects.filter(pk=pk).values_list("name", flat=True).first()
                self.message_user(request, f"Did not run {broken}: {exc}", messages.ERROR)
                continue
            log_changes(request, Schedule, {pk: f"Ran the schedule now as job #{job_id}"})
            url = reverse("admin:django_pgqueue_job_change", args=[job_id])
            self.message_user(
                request,
                format_html('Ran {} now as job <a href="{}">#{}</a>.', name, url, job_id),
                messages.SUCCESS,
            )
