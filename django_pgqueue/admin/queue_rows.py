"""The admin shared by every queue table (jobs, webhook deliveries).

Operators get four operations, as bulk actions (``replay``, ``retry_now``,
``cancel``, ``move_to_dlq``) and as row/detail buttons. Both go through a
confirmation page and call :func:`django_pgqueue.storage.apply_operation`, the
one guarded UPDATE per operation, so a row a worker holds is never touched and
a double submit changes nothing the second time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext_lazy as _

from .. import storage
from ..models.queue import Status
from .audit import log_changes, report
from .paginator import EstimatedCountPaginator
from .row_actions import RowActionsAdmin, row_action


@dataclass(frozen=True)
class Operation:
    """How the admin names and explains one storage operation."""

    name: str
    label: str
    done: str
    result_state: str
    explanation: str

    @property
    def allowed_states(self) -> tuple[str, ...]:
        return tuple(str(s) for s in storage.OPERATIONS[self.name][0])


OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in (
        Operation(
            "replay",
            _("Replay"),
            "Replayed",
            Status.PENDING,
            _("Back to pending and due now, attempts reset; the error history is kept."),
        ),
        Operation(
            "retry_now",
            _("Retry now"),
            "Scheduled to retry now",
            Status.FAILED,
            _("A failed row waiting for its retry becomes due now."),
        ),
        Operation(
            "cancel",
            _("Cancel"),
            "Cancelled",
            Status.CANCELLED,
            _("A pending or failed row will not run."),
        ),
        Operation(
            "move_to_dlq",
            _("Move to DLQ"),
            "Moved to the dead-letter queue",
            Status.DEAD,
            _("The row stops being retried and waits in the dead-letter queue."),
        ),
    )
}


def _applies(operation: str):
    allowed = OPERATIONS[operation].allowed_states
    return lambda obj: obj.status in allowed


def operation_button(operation: str, style: str = ""):
    """A row/detail button for ``operation`` (GET: confirm; POST: act)."""
    op = OPERATIONS[operation]

    def view(self: QueueRowAdmin, request: HttpRequest, pk: int) -> HttpResponse:
        return self.operation_row_view(request, pk, operation)

    return row_action(
        op.label,
        operation.replace("_", "-"),
        permission="operate",
        applies=_applies(operation),
        style=style,
    )(view)


def _bulk_action(operation: str, description: str):
    """A bulk admin action named ``operation`` (the name is the public contract)."""

    @admin.action(permissions=["operate"], description=description)
    def action(self: QueueRowAdmin, request: HttpRequest, queryset: QuerySet):
        return self.confirm_or_apply(request, queryset, operation)

    action.__name__ = operation
    return action


class QueueRowAdmin(RowActionsAdmin):
    """Read-only, fast admin for a queue table with the four operator actions.

    Subclasses set :attr:`operate_permission` (the codename allowing the
    operations) and name their buttons ``pgqueue_<model>_<operation>``.
    """

    operate_permission = ""
    actions = ["replay", "retry_now", "cancel", "move_to_dlq"]
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    list_per_page = 50
    ordering = ("-id",)
    confirm_template = "admin/django_pgqueue/confirm_operation.html"

    # Read-only: state changes only through the operations.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """Whether the user may replay, retry, cancel or dead-letter these rows."""
        app_label = self.model._meta.app_label
        return request.user.has_perm(f"{app_label}.{self.operate_permission}")

    def get_search_results(self, request, queryset, search_term):
        # An integer finds the row by id (index lookup); text goes to search_fields.
        term = search_term.strip().lstrip("#")
        if term.isdigit():
            return queryset.filter(pk=int(term)), False
        return super().get_search_results(request, queryset, search_term)

    def changelist_view(self, request: HttpRequest, extra_context=None):
        # Django drops an action the user may not run and redirects with a
        # message; a forged POST of one of ours is answered 403 instead.
        forged = request.method == "POST" and set(request.POST.getlist("action")) & set(OPERATIONS)
        if forged and not self.has_operate_permission(request):
            raise PermissionDenied
        return super().changelist_view(request, extra_context)

    # ----- bulk actions: the names are the public contract -------------------

    replay = _bulk_action("replay", _("Replay selected (back to pending)"))
    retry_now = _bulk_action("retry_now", _("Retry selected now"))
    cancel = _bulk_action("cancel", _("Cancel selected"))
    move_to_dlq = _bulk_action("move_to_dlq", _("Move selected to the dead-letter queue"))

    def confirm_or_apply(
        self, request: HttpRequest, queryset: QuerySet, operation: str
    ) -> HttpResponse | None:
        """First POST: a confirmation page. Confirmed POST: apply and report."""
        if request.POST.get("post") == "yes":
            self.apply(request, operation, list(queryset.values_list("pk", flat=True)))
            return None  # back to the changelist
        op = OPERATIONS[operation]
        by_status = dict(
            queryset.order_by().values("status").annotate(n=Count("pk")).values_list("status", "n")
        )
        context = {
            **self.admin_site.each_context(request),
            "title": op.label,
            "opts": self.model._meta,
            "operation": op,
            "action_name": operation,
            "selected_ids": list(queryset.values_list("pk", flat=True)),
            "will_change": sum(n for s, n in by_status.items() if s in op.allowed_states),
            "will_skip": {
                Status(s).label: n for s, n in by_status.items() if s not in op.allowed_states
            },
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "bulk": True,
        }
        return TemplateResponse(request, self.confirm_template, context)

    def apply(
        self, request: HttpRequest, operation: str, ids: list[int]
    ) -> storage.OperationResult:
        """Run the storage operation, then write the audit log and tell the user."""
        op = OPERATIONS[operation]
        result = storage.apply_operation(self.model, operation, ids)
        log_changes(
            request,
            self.model,
            {pk: f"{op.label}: {old} -> {op.result_state}" for pk, old in result.changed.items()},
        )
        report(self, request, op.done, result.changed, result.skipped)
        return result

    # ----- row and detail buttons --------------------------------------------

    def operation_row_view(self, request: HttpRequest, pk: int, operation: str) -> HttpResponse:
        """GET shows what will happen; only a POST (with its CSRF token) acts."""
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        obj = get_object_or_404(self.get_queryset(request), pk=pk)
        changelist = reverse(
            f"{self.admin_site.name}:{self.model._meta.app_label}_{self.model._meta.model_name}_changelist"
        )
        next_url = request.POST.get("next") or request.GET.get("next") or ""
        if not url_has_allowed_host_and_scheme(
            next_url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        ):
            next_url = ""
        if request.method == "POST":
            self.apply(request, operation, [obj.pk])
            return HttpResponseRedirect(next_url or changelist)
        op = OPERATIONS[operation]
        referer = request.META.get("HTTP_REFERER", "")
        if not next_url and url_has_allowed_host_and_scheme(
            referer, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        ):
            next_url = referer
        context = {
            **self.admin_site.each_context(request),
            "title": op.label,
            "opts": self.model._meta,
            "operation": op,
            "object": obj,
            "applies": obj.status in op.allowed_states,
            "next": next_url,
            "bulk": False,
        }
        return TemplateResponse(request, self.confirm_template, context)
