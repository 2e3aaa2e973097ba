"""The admin shared by every queue table (jobs, webhook deliveries).

Operators get the row operations declared in :mod:`django_pgqueue.operations`
(replay, retry now, cancel, move to the DLQ; jobs add abort), as bulk actions and
as row/detail buttons, all built from the declarations (``row_actions.py``). Both
go through a confirmation page and call
:func:`django_pgqueue.operations.apply_operation`, the one guarded UPDATE per
operation, so a row a worker holds is never touched (except by abort, which only
flags it) and a double submit changes nothing the second time.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from ..authority import Operator
from ..contract import strict_int
from ..models.queue import Status
from ..operations import Operation, apply_operation
from .audit import log_changes, report
from .display import WhenDatesMixin, error_history, first_line, status_badge, when
from .paginator import EstimatedCountPaginator
from .read_only import ReadOnlyAdminMixin
from .row_actions import RowActionsAdmin


class QueueRowAdmin(WhenDatesMixin, ReadOnlyAdminMixin, RowActionsAdmin):
    """Read-only, fast admin for a queue table with its operator actions.

    Subclasses set :attr:`operations` (``operations.JOB_OPERATIONS`` ...); the bulk
    actions, buttons and permission checks follow from it.
    """

    paginator = EstimatedCountPaginator
    show_full_result_count = False
    list_per_page = 50
    ordering = ("-id",)

    def get_search_results(self, request, queryset, search_term):
        # An integer finds the row by id (index lookup); text goes to search_fields.
        term = search_term.strip().lstrip("#")
        try:
            return queryset.filter(pk=strict_int(term, "id", minimum=1)), False
        except ValueError:
            pass
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
        return format_html("{} ({})", when(obj.locked_until), obj.locked_by)

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

    # ----- operations ----------------------------------------------------------

    def bulk_preview(self, queryset: QuerySet, op: Operation) -> dict[str, Any]:
        by_status = dict(
            queryset.order_by().values("status").annotate(n=Count("pk")).values_list("status", "n")
        )
        allowed = getattr(op, "allowed", ())
        return {
            "will_change": sum(n for s, n in by_status.items() if s in allowed),
            "will_skip": {Status(s).label: n for s, n in by_status.items() if s not in allowed},
        }

    def run_operation(
        self,
        request: HttpRequest,
        op: Operation,
        ids: list[int],
        data: dict[str, Any],
    ) -> HttpResponse | None:
        """Run the operation, then write the audit log and tell the user."""
        # The operator as the actor: the same check (authority.authorize) as every door.
        result = apply_operation(self.model, op.name, ids, actor=Operator(request.user))
        log_changes(request, self.model, {pk: op.audit(old) for pk, old in result.changed.items()})
        report(self, request, op.done, result.changed, result.skipped)
        return None
