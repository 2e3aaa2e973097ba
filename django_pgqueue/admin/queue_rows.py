"""The admin shared by every queue table (jobs, webhook deliveries).

Operators get four operations, as bulk actions (``replay``, ``retry_now``,
``cancel``, ``move_to_dlq``) and as row/detail buttons. Both go through a
confirmation page and call :func:`django_pgqueue.storage.apply_operation`, the
one guarded UPDATE per operation, so a row a worker holds is never touched and
a double submit changes nothing the second time. Jobs add a fifth, ``abort``
(``admin/jobs.py``), the one operation that may flag a running row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from .. import storage
from ..models.queue import Status
from .audit import log_changes, report
from .display import error_history, first_line, status_badge
from .paginator import EstimatedCountPaginator
from .row_actions import RowActionsAdmin, row_action

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise


@dataclass(frozen=True)
class Operation:
    """How the admin names and explains one storage operation."""

    name: str
    label: StrOrPromise
    done: StrOrPromise
    result_state: str
    explanation: StrOrPromise

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
        Operation(
            "abort",
            _("Abort"),
            "Aborted",
            Status.CANCELLED,
            _(
                "A pending or failed job is cancelled. A running job is told to stop: its "
                "worker records the attempt as cancelled within a third of the lease and "
                "discards whatever the task still returns."
            ),
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


def bulk_action(operation: str, description: StrOrPromise):
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
    action_permission = "operate"
    actions = ["replay", "retry_now", "cancel", "move_to_dlq"]
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    list_per_page = 50
    ordering = ("-id",)

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

    # ----- columns and detail fields shared by every queue table -------------

    @admin.display(description=_("status"), ordering="status")
    def status_display(self, obj: Any):
        return status_badge(obj.status, obj.get_status_display())

    @admin.display(description=_("attempts"))
    def attempts_display(self, obj: Any) -> str:
        return f"{obj.attempts}/{obj.max_attempts}"

    @staticmethod
    def error_is_earlier(obj: Any) -> bool:
        """Whether ``last_error`` is from an attempt before the row's current state.

        It is kept after a success, a replay or a cancel (it is history), and only a
        failed or dead row is in its state because of it.
        """
        return bool(obj.last_error) and obj.status not in (Status.FAILED, Status.DEAD)

    @admin.display(description=_("last error"))
    def last_error_line(self, obj: Any) -> str:
        line = first_line(obj.last_error)
        if line and self.error_is_earlier(obj):
            return _("(earlier attempt) %(error)s") % {"error": line}
        return line

    @admin.display(description=_("lease"))
    def lease(self, obj: Any):
        if obj.locked_until is None:
            return "—"
        return format_html("{} ({})", obj.locked_until, obj.locked_by)

    @admin.display(description=_("last error"))
    def last_error_pre(self, obj: Any):
        text = format_html('<pre class="pgq-traceback">{}</pre>', obj.last_error or "—")
        if not self.error_is_earlier(obj):
            return text
        note = _("From an earlier attempt: the row is %(status)s now.") % {
            "status": obj.get_status_display().lower()
        }
        return format_html('<p class="pgq-muted pgq-earlier">{}</p>{}', note, text)

    @admin.display(description=_("error history (newest first)"))
    def errors_history(self, obj: Any):
        return error_history(obj.errors)

    # ----- bulk actions: the names are the public contract -------------------

    replay = bulk_action("replay", _("Replay selected (back to pending)"))
    retry_now = bulk_action("retry_now", _("Retry selected now"))
    cancel = bulk_action("cancel", _("Cancel selected"))
    move_to_dlq = bulk_action("move_to_dlq", _("Move selected to the dead-letter queue"))

    def confirm_or_apply(
        self, request: HttpRequest, queryset: QuerySet, operation: str
    ) -> HttpResponse | None:
        """First POST: a confirmation page with what will change. Confirmed: apply."""
        op = OPERATIONS[operation]
        by_status = dict(
            queryset.order_by().values("status").annotate(n=Count("pk")).values_list("status", "n")
        )
        return self.confirm_bulk(
            request,
            queryset,
            operation,
            label=op.label,
            explanation=op.explanation,
            apply=lambda ids: self.apply(request, operation, ids),
            will_change=sum(n for s, n in by_status.items() if s in op.allowed_states),
            will_skip={
                Status(s).label: n for s, n in by_status.items() if s not in op.allowed_states
            },
        )

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
        op = OPERATIONS[operation]

        def act(obj: Any, data: dict[str, Any]) -> HttpResponse | None:
            self.apply(request, operation, [obj.pk])
            return None

        return self.confirmed_row_view(
            request,
            pk,
            label=op.label,
            explanation=op.explanation,
            applies=lambda obj: obj.status in op.allowed_states,
            act=act,
        )
