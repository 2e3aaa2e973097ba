"""The queue dashboard: every queue's backlog, lag, in-flight, stuck and dead rows."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.translation import gettext_lazy as _

from ..models.queue import Status
from ..stats import job_queue_overview

#: Columns of the per-queue table, in lifecycle order.
STATUS_COLUMNS = (
    Status.PENDING,
    Status.IN_PROGRESS,
    Status.FAILED,
    Status.DEAD,
    Status.SUCCEEDED,
    Status.CANCELLED,
)


def _filtered(changelist: str, queue_name: str, status: str) -> str:
    return f"{changelist}?{urlencode({'queue_name': queue_name, 'status': status})}"


def dashboard_view(model_admin: Any, request: HttpRequest) -> HttpResponse:
    """Render the dashboard from one aggregated query per queue table."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    opts = model_admin.model._meta
    changelist = reverse(
        f"{model_admin.admin_site.name}:{opts.app_label}_{opts.model_name}_changelist"
    )
    queues = []
    for stats in job_queue_overview():
        cells = [
            {
                "status": status,
                "count": stats.counts.get(status, 0),
                "url": _filtered(changelist, stats.name, status),
            }
            for status in STATUS_COLUMNS
        ]
        queues.append(
            {
                "stats": stats,
                "cells": cells,
                "stuck_url": _filtered(changelist, stats.name, "stuck"),
                "dead_url": _filtered(changelist, stats.name, Status.DEAD),
            }
        )
    context = {
        **model_admin.admin_site.each_context(request),
        "title": _("Queue dashboard"),
        "opts": opts,
        "queues": queues,
        "status_columns": [(s, s.label) for s in STATUS_COLUMNS],
        "changelist_url": changelist,
        "endpoint_sections": [],
    }
    return TemplateResponse(request, "admin/django_pgqueue/dashboard.html", context)
