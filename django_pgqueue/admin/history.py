"""Admin for the job history: finished jobs moved out of the live table, read-only,
searchable, with replay back to live (docs/operations.md, "History and retention").

The list reads ``pgqueue_job_history`` (every partition); a job id is found by its
primary key in each partition. Replay is the jobs' replay with its permission
(``replay_job``), a POST behind a confirmation page like every row action, carried
out by :func:`django_pgqueue.operations.replay_from_history`.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext_lazy as _

from ..authority import Operator
from ..models.queue import Job, JobHistory
from ..operations import HISTORY_OPERATIONS, Operation, replay_from_history
from .audit import log_changes, report
from .filters import RecentValuesFilter, StatusFilter
from .jobs import JobColumnsAdmin, job_fieldsets


@admin.register(JobHistory)
class JobHistoryAdmin(JobColumnsAdmin):
    operations = HISTORY_OPERATIONS
    list_display = (
        "id",
        "task",
        "queue_name",
        "status_display",
        "attempts_display",
        "finished_at",
        "created_at",
        "last_error_line",
    )
    list_display_links = ("id", "task")
    list_filter = (
        StatusFilter,
        ("queue_name", RecentValuesFilter),
        ("task_path", RecentValuesFilter),
        "finished_at",
    )
    list_select_related = False
    ordering = ("-finished_at",)
    search_fields = ("task_path",)
    search_help_text = _("A job id, or part of a task path.")
    fieldsets = job_fieldsets(live=False)
    readonly_fields = flatten_fieldsets(fieldsets)

    def run_operation(
        self, request: HttpRequest, op: Operation, ids: list[int], data: dict[str, Any]
    ) -> HttpResponse | None:
        result = replay_from_history(ids, actor=Operator(request.user))
        # The audit entries are the live jobs' (the rows are live again).
        log_changes(request, Job, {pk: op.audit(old) for pk, old in result.changed.items()})
        report(self, request, op.done, result.changed, result.skipped)
        return None
