"""The queue dashboard: every queue's backlog, lag, in-flight, stuck and dead rows, and
charts of the last hour or day from the rollup (``chart_series.py``)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.translation import gettext_lazy as _

from ..conf import get_settings
from ..models.queue import Status
from ..models.webhooks import Application
from ..stats import delivery_overview, job_queue_overview, worker_overview
from . import chart_series
from .display import endpoint_label

#: The longest queue name (``Job.queue_name``): a longer chart filter is refused.
QUEUE_NAME_MAX = 100

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


def _message_queue_filter(value: str | None) -> tuple[str | None, Any]:
    """The message queue the charts are narrowed to (untrusted input), or why not."""
    if not value:
        return None, None
    from ..mq.exceptions import InvalidQueueName
    from ..mq.validation import check_name

    try:
        return check_name(value), None
    except InvalidQueueName:
        return None, _("not a message queue name")


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
    window = chart_series.window_of(request.GET.get("window"))
    application = request.GET.get("application") or None
    if application is not None and (len(application) > 255 or "\x00" in application):
        refused_application, application = _("not an application uid"), None
    else:
        refused_application = None
    delivery_charts: list[tuple[Any, list[chart_series.Chart]]] = []
    applications: list[str] = []
    if request.user.has_perm("django_pgqueue.view_delivery"):
        applications = list(Application.objects.order_by("uid").values_list("uid", flat=True)[:200])
        delivery_charts = [
            (_("Deliveries per endpoint"), chart_series.endpoint_charts(window, application)),
            (_("Deliveries per application"), chart_series.application_charts(window, application)),
        ]
    message_queues = []
    mq_charts: list[chart_series.Chart] = []
    chart_mq, refused_mq = _message_queue_filter(request.GET.get("mq"))
    if request.user.has_perm("django_pgqueue.view_messagequeue"):
        from .mq import dashboard_rows

        message_queues = dashboard_rows(model_admin.admin_site.name)
        mq_charts = chart_series.message_queue_charts(window, chart_mq)
    queue = request.GET.get("queue") or None
    refused_queue = None
    if queue is not None and (len(queue) > QUEUE_NAME_MAX or "\x00" in queue):
        refused_queue, queue = _("not a queue name (at most 100 characters, no NUL)"), None
    context = {
        **model_admin.admin_site.each_context(request),
        "window": window,
        "windows": [
            (name, label, f"?{urlencode({'window': name})}")
            for name, label in (("hour", _("Last hour")), ("day", _("Last day")))
        ],
        "chart_queue": queue,
        "refused_queue": refused_queue,
        "chart_application": application,
        "chart_mq": chart_mq,
        "refused_mq": refused_mq,
        "mq_charts": mq_charts,
        "mq_names": [row["info"].name for row in message_queues],
        "refused_application": refused_application,
        "applications": applications,
        "delivery_charts": delivery_charts,
        "queue_charts": chart_series.queue_charts(window, queue),
        "rollup_on": get_settings().ROLLUP,
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
