"""Admin for message queues: the queue list with sizes, a message browser, and the
operator's delete / archive / move-back, each a POST with CSRF, a permission and a
LogEntry, all through ``django_pgqueue.mq.store``."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseRedirect,
)
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from ..conf import get_settings
from ..contract import BIGINT_MAX, strict_int
from ..models.mq import MessageQueue
from ..mq import store
from ..mq.exceptions import InvalidQueueName, QueueError
from ..mq.validation import check_msg_id, check_name
from .audit import log_changes
from .display import WhenDatesMixin, duration
from .read_only import ReadOnlyAdminMixin

#: Messages shown per page of the browser.
PAGE_SIZE = 50
#: The last page whose offset PostgreSQL's bigint holds.
MAX_PAGE = BIGINT_MAX // PAGE_SIZE - 1
#: Characters of an undecodable document shown in the browser.
RAW_PREVIEW = 500
#: The browser's operations, each confirmed on a page of its own before it runs.
OPERATIONS = {
    "delete": _("delete"),
    "archive": _("archive"),
    "move_back": _("move back to the queue it came from"),
}


@admin.register(MessageQueue)
class MessageQueueAdmin(WhenDatesMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Queues are created and dropped by code (``mq.create``); the admin reads and operates."""

    list_display = (
        "name",
        "depth",
        "visible",
        "oldest",
        "archive_size",
        "archive_retention",
        "unlogged",
        "max_reads",
        "dead_letter",
        "browse",
    )
    readonly_fields = (
        "name",
        "unlogged",
        "max_reads",
        "dead_letter",
        "archive_retention",
        "created_at",
    )
    operate_permission = "operate_messagequeue"

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"django_pgqueue.{self.operate_permission}")

    # -- the list: one stats query per queue, cached per request row -------------------

    def _stats(self, obj: MessageQueue) -> tuple[int, int, float | None, int]:
        cached = getattr(obj, "_pgq_stats", None)
        if cached is None:
            try:
                cached = store.stats(obj.name)
            except QueueError:
                cached = (0, 0, None, 0)
            obj._pgq_stats = cached  # type: ignore[attr-defined]
        return cached

    @admin.display(description=_("messages"))
    def depth(self, obj: MessageQueue) -> int:
        return self._stats(obj)[0]

    @admin.display(description=_("visible"))
    def visible(self, obj: MessageQueue) -> int:
        return self._stats(obj)[1]

    @admin.display(description=_("oldest"))
    def oldest(self, obj: MessageQueue) -> str:
        return duration(self._stats(obj)[2])

    @admin.display(description=_("archived"))
    def archive_size(self, obj: MessageQueue) -> int:
        return self._stats(obj)[3]

    @admin.display(description=_("browse"))
    def browse(self, obj: MessageQueue) -> str:
        url = reverse(f"{self.admin_site.name}:django_pgqueue_messagequeue_messages", args=[obj.pk])
        return format_html('<a href="{}">{}</a>', url, _("messages"))

    # -- the message browser -----------------------------------------------------------

    def get_urls(self):
        return [
            path(
                "<str:name>/messages/",
                self.admin_site.admin_view(self.messages_view),
                name="django_pgqueue_messagequeue_messages",
            ),
            *super().get_urls(),
        ]

    def messages_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """GET: a page of messages (or of the archive). POST: an operation on the selected."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            check_name(name)  # a NUL, or any name no queue can have, before SQL
        except InvalidQueueName as exc:
            raise Http404(str(exc)) from exc
        queue = get_object_or_404(MessageQueue, pk=name)
        is_dead_letter_queue = _is_dead_letter_queue(name)
        if request.method == "POST":
            if not self.has_operate_permission(request):
                raise PermissionDenied
            try:
                ids = sorted({check_msg_id(i) for i in request.POST.getlist("msg_id")})
            except ValueError as exc:
                return HttpResponseBadRequest(str(exc), content_type="text/plain")
            operation = request.POST.get("operation")
            if operation == "move_back" and not is_dead_letter_queue:
                return HttpResponseBadRequest(
                    f"{name!r} is no queue's dead-letter queue: its messages have no queue "
                    "to move back to.",
                    content_type="text/plain",
                )
            if ids and operation in OPERATIONS and request.POST.get("confirm") != "yes":
                return self._confirm(request, queue, operation, ids)
            self._operate(request, queue, ids)
            return HttpResponseRedirect(request.get_full_path())
        archived = request.GET.get("archived") == "1"
        try:
            page = strict_int(request.GET.get("page", "0"), "page", minimum=0, maximum=MAX_PAGE)
        except ValueError as exc:
            return HttpResponseBadRequest(str(exc), content_type="text/plain")
        rows = store.browse(name, archived=archived, limit=PAGE_SIZE + 1, offset=page * PAGE_SIZE)
        shown = [self._row(row) for row in rows[:PAGE_SIZE]]
        context = {
            **self.admin_site.each_context(request),
            "title": _("Messages of %(name)s") % {"name": name},
            "opts": self.model._meta,
            "queue": queue,
            "archived": archived,
            "rows": shown,
            "page": page,
            "has_next": len(rows) > PAGE_SIZE,
            "can_operate": self.has_operate_permission(request) and not archived,
            "is_dead_letter_queue": is_dead_letter_queue,
        }
        return TemplateResponse(request, "admin/django_pgqueue/mq_messages.html", context)

    def _confirm(
        self, request: HttpRequest, queue: MessageQueue, operation: str, ids: list[int]
    ) -> HttpResponse:
        """The confirmation step: deleting or archiving cannot be undone from here, so
        the first POST only shows what the second (with ``confirm=yes``) will do."""
        context = {
            **self.admin_site.each_context(request),
            "title": _("Are you sure?"),
            "opts": self.model._meta,
            "queue": queue,
            "operation": operation,
            "operation_label": OPERATIONS[operation],
            "ids": ids,
            "back": request.get_full_path(),
        }
        return TemplateResponse(request, "admin/django_pgqueue/mq_confirm.html", context)

    @staticmethod
    def _row(row: tuple[Any, ...]) -> dict[str, Any]:
        """One row of the browser; a row Python cannot decode is shown as its raw
        text (truncated) beside the error, and can still be selected."""
        message = store.decode_row(row)
        error = None
        if isinstance(message, str):
            error = message
            message = store.Message(
                row[0], row[1], row[2], row[3], _preview(row[4]), _preview(row[5])
            )
        headers = message.headers if isinstance(message.headers, dict) else {}
        origin = headers.get(store.sql.DEAD_LETTER_HEADER)
        return {
            "m": message,
            # JSON as the producer sent it (decoded, so shown as JSON, never a repr);
            # an undecodable row shows its raw text.
            "message": message.message if error else _json_text(message.message),
            "headers": message.headers if error else _json_text(message.headers),
            "error": error,
            "archived_at": row[6] if len(row) > 6 else None,
            "origin": origin.get("queue") if isinstance(origin, dict) else None,
        }

    def _operate(self, request: HttpRequest, queue: MessageQueue, ids: list[int]) -> None:
        operation = request.POST.get("operation")
        if not ids or operation not in OPERATIONS:
            self.message_user(request, _("Select messages and an operation."), messages.WARNING)
            return
        refused: dict[int, str] = {}
        with transaction.atomic(using=get_settings().DATABASE):
            if operation == "delete":
                done = store.delete(queue.name, ids)
                note = f"Deleted messages {done}"
            elif operation == "archive":
                done = store.archive(queue.name, ids)
                note = f"Archived messages {done}"
            else:
                result = store.move_back(queue.name, ids)
                refused = result.refused
                done = [i for old, _ in result.moved.values() for i in old]
                note = "; ".join(
                    f"Moved messages {old} back to {origin} (now {new})"
                    for origin, (old, new) in result.moved.items()
                )
            if done:
                # A str primary key; LogEntry stores str(pk) either way.
                log_changes(request, MessageQueue, {queue.pk: note})  # type: ignore[dict-item]
        self.message_user(request, f"{note or 'Nothing done'}.", messages.SUCCESS)
        if operation == "move_back":
            for msg_id, reason in sorted(refused.items()):
                self.message_user(request, f"Not moved {msg_id}: {reason}.", messages.WARNING)
        elif len(done) < len(ids):
            self.message_user(request, f"Skipped {len(ids) - len(done)}: gone.", messages.WARNING)


def _is_dead_letter_queue(name: str) -> bool:
    """Whether some queue names ``name`` as its dead-letter queue: only then do its
    messages have an origin to be moved back to."""
    return any(info.dead_letter == name for info in store.list_queues())


def _json_text(value: Any) -> str:
    if value is None:
        return ""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def _preview(text: str | None) -> str | None:
    if text is None or len(text) <= RAW_PREVIEW:
        return text
    return f"{text[:RAW_PREVIEW]}... ({len(text)} characters)"


def dashboard_rows(site_name: str) -> list[dict[str, Any]]:
    """The dashboard's message-queue table: one stats query per queue."""
    rows = []
    for info in store.list_queues():
        try:
            depth, visible, oldest, archived = store.stats(info.name)
        except QueueError:
            continue  # dropped meanwhile
        rows.append(
            {
                "info": info,
                "depth": depth,
                "visible": visible,
                "oldest": duration(oldest),
                "archived": archived,
                "url": reverse(
                    f"{site_name}:django_pgqueue_messagequeue_messages", args=[info.name]
                ),
            }
        )
    return rows
