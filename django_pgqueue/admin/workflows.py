"""The workflow page: the graph of steps with their states (SVG drawn on the server),
the counts, and the cancel action (POST with CSRF and its own permission, logged)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.safestring import mark_safe
from django.utils.translation import gettext_lazy as _

from ..authority import has_permission
from ..models.workflows import Workflow
from ..workflows import cancel_workflow, get_workflow
from ..workflows.graph import workflow_svg
from .audit import log_changes
from .read_only import ReadOnlyAdminMixin

#: The one permission of the workflow actions (Workflow.Meta.permissions).
CANCEL_PERMISSION = "cancel_workflow"


@admin.register(Workflow)
class WorkflowAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("id", "name", "kind", "step_count", "created_at", "cancelled_at")
    list_filter = ("kind",)
    search_fields = ("name",)
    ordering = ("-id",)

    def has_cancel_workflow_permission(self, request: HttpRequest) -> bool:
        return has_permission(request.user, CANCEL_PERMISSION)

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view(self.cancel_view)  # login and CSRF
        return [
            path("<int:workflow_id>/cancel/", view, name="django_pgqueue_workflow_cancel"),
            *super().get_urls(),
        ]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        row = get_object_or_404(Workflow, pk=object_id)
        if not self.has_view_permission(request, row):
            raise PermissionDenied
        state = get_workflow(row.pk)
        assert state is not None  # the row exists
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "original": row,
            "title": f"{row.kind} {row.name} (#{row.pk}): {state.status}",
            "state": state,
            "graph": mark_safe(workflow_svg(state.steps, state.edges)),  # noqa: S308 - escaped
            "can_cancel": state.status == "running"
            and self.has_cancel_workflow_permission(request),
            "cancel_url": reverse("admin:django_pgqueue_workflow_cancel", args=[row.pk]),
        }
        return TemplateResponse(request, "admin/django_pgqueue/workflow.html", context)

    def cancel_view(self, request: HttpRequest, workflow_id: int) -> HttpResponse:
        """POST only: cancel the workflow (GET shows nothing to change)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_cancel_workflow_permission(request):
            raise PermissionDenied
        row = get_object_or_404(Workflow, pk=workflow_id)
        changed = cancel_workflow(row.pk)
        log_changes(request, Workflow, {row.pk: f"Cancel workflow ({changed} steps changed)"})
        self.message_user(request, _("Cancelled: %(n)d steps.") % {"n": changed}, messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:django_pgqueue_workflow_change", args=[row.pk]))
