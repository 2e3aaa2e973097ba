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
from ..stats import delivery_overview, job_queue_overview, worker_overview

#: Columns of the per-queue table, in lifecycle order.
STATUS_COLUMNS = (
    Status.WAITING,
    Status.PENDING,
    Status.IN_PROGRESS,
    Status.FAILED,
    Status.DEAD,
    Status.SUCCEEDED,
    Status.CANCELLED,
)


def _filtered(changelist: str, status: str, **params: Any) -> str:
    return f"{changelist}?{urlencode({**params, 'status': status})}"


def endpoint_label(endpoint_id: int, url: str, application: str | None) -> str:
    """How the admin names an endpoint wherever it lists one: id, URL and application,
    so two endpoints with one URL (say, of two customers) never look the same."""
    return f"#{endpoint_id} {url} · {application or _('global')}"


def _rows(stats_list, changelist: str, label=None, **key) -> list[dict[str, Any]]:
    """One table row per queue: a linked count per state and the stuck link."""
    rows = []
    for stats in stats_list:
        params = {name: getattr(stats, attr) for name, attr in key.items()}
        rows.append(
            {
                "stats": stats,
                "label": label(stats) if label else stats.name,
                "cells": [
                    {
                        "status": status,
                        "count": stats.counts.get(status, 0),
                        "url": _filtered(changelist, status, **params),
                    }
                    for status in STATUS_COLUMNS
                ],
                "url": f"{changelist}?{urlencode(params)}",
                "stuck_url": _filtered(changelist, "stuck", **params),
            }
        )
    return rows


def attention_by_application(stats_list: list[Any]) -> list[tuple[str | None, list[Any]]]:
    """Endpoints not delivering, grouped by application (global ones first): one
    customer with many broken endpoints reads as one problem."""
    groups: dict[str | None, list[Any]] = {}
    for stats in stats_list:
        groups.setdefault(stats.application, []).append(stats)
    return sorted(groups.items(), key=lambda item: (item[0] is not None, item[0] or ""))


def dashboard_view(model_admin: Any, request: HttpRequest) -> HttpResponse:
    """Render the dashboard: one aggregated query for jobs, one for webhooks."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    opts = model_admin.model._meta
    changelist = reverse(
        f"{model_admin.admin_site.name}:{opts.app_label}_{opts.model_name}_changelist"
    )
    queues = _rows(job_queue_overview(), changelist, queue_name="name")
    endpoints = []
    if request.user.has_perm("django_pgqueue.view_delivery"):
        deliveries = reverse(f"{model_admin.admin_site.name}:django_pgqueue_delivery_changelist")
        endpoints = _rows(
            delivery_overview(),
            deliveries,
            label=lambda s: endpoint_label(s.endpoint_id, s.name, s.application),
            endpoint__id__exact="endpoint_id",
        )
    message_queues = []
    if request.user.has_perm("django_pgqueue.view_messagequeue"):
        from .mq import dashboard_rows

        message_queues = dashboard_rows(model_admin.admin_site.name)
    context = {
        **model_admin.admin_site.each_context(request),
        "title": _("Queue dashboard"),
        "message_queues": message_queues,
        "opts": opts,
        "queues": queues,
        "status_columns": [(s, s.label) for s in STATUS_COLUMNS],
        "changelist_url": changelist,
        "endpoints": endpoints,
        "workers": worker_overview(),
        "attention": attention_by_application(
            [row["stats"] for row in endpoints if row["stats"].needs_attention]
        ),
    }
    return TemplateResponse(request, "admin/django_pgqueue/dashboard.html", context)
