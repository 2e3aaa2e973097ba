"""Admin for message queues: the queue list with sizes, a message browser, and the
operator's delete / archive / move-back, each a POST with CSRF, a permission and a
LogEntry, all through ``django_pgqueue.mq.store``."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from ..conf import get_settings
from ..models.mq import MessageQueue
from ..mq import store
from ..mq.exceptions import QueueError
from .audit import log_changes
from .read_only import ReadOnlyAdminMixin

#: Messages shown per page of the browser.
PAGE_SIZE = 50
#: The header that records where a dead letter came from (mq/sql.py).
DEAD_LETTER_HEADER = "x-pgqueue-dead-letter"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@admin.register(MessageQueue)
class MessageQueueAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Queues are created and dropped by code (``mq.create``); the admin reads and operates."""

    list_display = (
        "name",
        "depth",
        "visible",
        "oldest",
        "archive_size",
        "unlogged",
        "max_reads",
        "dead_letter",
        "browse",
    )
    readonly_fields = ("name", "unlogged", "max_reads", "dead_letter", "created_at")
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
        return _age(self._stats(obj)[2])

    @admin.display(description=_("archived (estimate)"))
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
        queue = get_object_or_404(MessageQueue, pk=name)
        if request.method == "POST":
            if not self.has_operate_permission(request):
                raise PermissionDenied
            self._operate(request, queue)
            return HttpResponseRedirect(request.get_full_path())
        archived = request.GET.get("archived") == "1"
        try:
            page = max(0, int(request.GET.get("page", "0")))
        except ValueError as exc:
            raise Http404 from exc
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
        }
        return TemplateResponse(request, "admin/django_pgqueue/mq_messages.html", context)

    @staticmethod
    def _row(row: tuple[Any, ...]) -> dict[str, Any]:
        message = store.Message.from_row(row)
        headers = message.headers if isinstance(message.headers, dict) else {}
        origin = headers.get(DEAD_LETTER_HEADER)
        return {
            "m": message,
            "archived_at": row[6] if len(row) > 6 else None,
            "origin": origin.get("queue") if isinstance(origin, dict) else None,
        }

    def _operate(self, request: HttpRequest, queue: MessageQueue) -> None:
        operation = request.POST.get("operation")
        try:
            ids = sorted({int(i) for i in request.POST.getlist("msg_id")})
        except ValueError:
            ids = []
        if not ids or operation not in ("delete", "archive", "move_back"):
            self.message_user(request, _("Select messages and an operation."), messages.WARNING)
            return
        with transaction.atomic(using=get_settings().DATABASE):
            if operation == "delete":
                done = store.delete(queue.name, ids)
                note = f"Deleted messages {done}"
            elif operation == "archive":
                done = store.archive(queue.name, ids)
                note = f"Archived messages {done}"
            else:
                done, note = self._move_back(queue.name, ids)
            if done:
                # A str primary key; LogEntry stores str(pk) either way.
                log_changes(request, MessageQueue, {queue.pk: note})  # type: ignore[dict-item]
        skipped = len(ids) - len(done)
        self.message_user(request, f"{note or 'Nothing done'}.", messages.SUCCESS)
        if skipped:
            self.message_user(
                request,
                f"Skipped {skipped}: gone, or not a dead letter with a known origin.",
                messages.WARNING,
            )

    @staticmethod
    def _move_back(name: str, ids: list[int]) -> tuple[list[int], str]:
        """Move dead letters to the queue each came from (new ids there)."""
        by_origin: dict[str, list[int]] = {}
        for row in store.browse_ids(name, ids):
            headers = store.Message.from_row(row).headers
            origin = headers.get(DEAD_LETTER_HEADER) if isinstance(headers, dict) else None
            if isinstance(origin, dict) and isinstance(origin.get("queue"), str):
                by_origin.setdefault(origin["queue"], []).append(row[0])
        done: list[int] = []
        notes = []
        for origin, msg_ids in sorted(by_origin.items()):
            try:
                new_ids = store.move(name, msg_ids, to=origin)
            except QueueError:
                continue  # the origin queue was dropped
            done.extend(msg_ids)
            notes.append(f"Moved messages {msg_ids} back to {origin} (now {new_ids})")
        return done, "; ".join(notes)


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
                "oldest": _age(oldest),
                "archived": archived,
                "url": reverse(
                    f"{site_name}:django_pgqueue_messagequeue_messages", args=[info.name]
                ),
            }
        )
    return rows
