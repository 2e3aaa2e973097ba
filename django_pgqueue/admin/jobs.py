"""Admin for jobs: list, read-only detail, operator actions and the dashboard URL."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.utils import flatten_fieldsets, unquote
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from ..models.queue import TERMINAL, Job, JobHistory
from ..operations import JOB_OPERATIONS
from .dashboard import dashboard_view
from .display import json_display, progress_html, when
from .filters import RecentValuesFilter, StatusFilter
from .queue_rows import QueueRowAdmin


def job_fieldsets(*, live: bool) -> tuple:
    """The job page's sections, for a live job or a history row: one declaration, so a
    new column shows in both. Only a live job has a next attempt, a lease and an abort
    request."""
    live_only = ("next_attempt_at", "lease", "abort_requested_at") if live else ()
    return (
        (
            None,
            {
                "fields": (
                    "id",
                    "task_path",
                    "queue_name",
                    "backend",
                    "status_display",
                    "progress_detail",
                )
            },
        ),
        (
            _("Scheduling"),
            {
                "fields": (
                    "priority",
                    "attempts_display",
                    *live_only,
                    "worker_id",
                    "created_at",
                    "started_at",
                    "last_attempted_at",
                    "finished_at",
                    "updated_at",
                )
            },
        ),
        (_("Call"), {"fields": ("args_json", "kwargs_json", "result_json")}),
        (_("Errors"), {"fields": ("last_error_pre", "errors_history", "workers_json")}),
    )


class JobColumnsAdmin(QueueRowAdmin):
    """What the live jobs' admin and the history's share: the columns of a job."""

    def get_queryset(self, request) -> QuerySet:
        # The list never shows the (possibly large) JSON columns.
        qs = super().get_queryset(request)
        url_name = getattr(request.resolver_match, "url_name", "") or ""
        if url_name.endswith("_changelist"):
            qs = qs.defer("args", "kwargs", "result", "errors", "worker_ids")
        return qs

    @admin.display(description=_("task"), ordering="task_path")
    def task(self, obj: Job) -> str:
        return obj.task_path.rsplit(".", 1)[-1]

    @admin.display(description=_("status"), ordering="status")
    def status_display(self, obj: Job):
        """The state's badge and, once the task reported any, its progress under it
        (in the status column, so the list keeps its width at 1,280 px; the message
        is the bar's tooltip, in full on the job page)."""
        badge = super().status_display(obj)
        if obj.progress is None:
            return badge
        return format_html(
            "{}<br>{}", badge, progress_html(obj.progress, None, title=obj.progress_message)
        )

    @admin.display(description=_("progress"))
    def progress_detail(self, obj: Job) -> str:
        shown = progress_html(obj.progress, obj.progress_message)
        if obj.progress_at is None:
            return shown
        return format_html('{} <span class="pgq-muted">({})</span>', shown, when(obj.progress_at))

    args_json = json_display("args", _("arguments"))
    kwargs_json = json_display("kwargs", _("keyword arguments"))
    result_json = json_display("result", _("result"))

    workers_json = json_display("worker_ids", _("worker of each attempt"))


@admin.register(Job)
class JobAdmin(JobColumnsAdmin):
    operations = JOB_OPERATIONS
    change_list_template = "admin/django_pgqueue/job/change_list.html"
    list_display = (
        "id",
        "task",
        "queue_name",
        "status_display",
        "attempts_display",
        "next_attempt_at",
        "created_at",
        "last_error_line",
    )
    list_display_links = ("id", "task")
    list_filter = (
        StatusFilter,
        ("queue_name", RecentValuesFilter),
        ("task_path", RecentValuesFilter),
        "created_at",
    )
    list_select_related = False  # no relations: keep the query a plain index scan
    search_fields = ("task_path",)
    search_help_text = _("A job id, or part of a task path.")
    fieldsets = job_fieldsets(live=True)

    readonly_fields = flatten_fieldsets(fieldsets)

    def get_urls(self):
        opts = self.model._meta
        return [
            path(
                "dashboard/",
                self.admin_site.admin_view(lambda request: dashboard_view(self, request)),
                name=f"{opts.app_label}_{opts.model_name}_dashboard",
            ),
            *super().get_urls(),
        ]

    # ----- jobs that finished and moved to the history ------------------------------
    # A finished job leaves pgqueue_job HISTORY_DELAY_SECONDS after it finished
    # (docs/operations.md, "History and retention"): its page and the list of
    # finished states lead there.

    def _history_admin(self, request: HttpRequest) -> admin.ModelAdmin | None:
        """The history's admin, when this user may view it."""
        if not self.admin_site.is_registered(JobHistory):
            return None
        history_admin = self.admin_site.get_model_admin(JobHistory)
        return history_admin if history_admin.has_view_permission(request) else None

    def _get_obj_does_not_exist_redirect(self, request, opts, object_id):
        key = unquote(object_id)
        if not key.isdigit() or not JobHistory.objects.filter(pk=int(key)).exists():
            return super()._get_obj_does_not_exist_redirect(request, opts, object_id)
        if self._history_admin(request) is None:
            self.message_user(
                request,
                gettext(
                    "Job %(id)s has finished and was moved to the job history, which you "
                    "do not have permission to view."
                )
                % {"id": key},
                messages.WARNING,
            )
            return HttpResponseRedirect(reverse("admin:index", current_app=self.admin_site.name))
        self.message_user(
            request,
            gettext("Job %(id)s has finished and was moved to the job history.") % {"id": key},
            messages.INFO,
        )
        url = reverse(
            "admin:django_pgqueue_jobhistory_change", args=[key], current_app=self.admin_site.name
        )
        return HttpResponseRedirect(url)

    def changelist_view(self, request: HttpRequest, extra_context=None) -> HttpResponse:
        status = request.GET.get("status")
        if status in {state.value for state in TERMINAL} and self._history_admin(request):
            url = reverse(
                "admin:django_pgqueue_jobhistory_changelist", current_app=self.admin_site.name
            )
            extra_context = {
                **(extra_context or {}),
                "pgqueue_history_url": f"{url}?{urlencode({'status': status})}",
            }
        return super().changelist_view(request, extra_context)
