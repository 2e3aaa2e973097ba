"""The job queues' flow control in the admin: limits, pause state and running jobs,
read-only, with pause and resume actions that call ``django_pgqueue.queues``."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from .. import queues
from ..conf import get_settings
from ..models import Queue
from .audit import log_changes
from .read_only import ReadOnlyAdminMixin


@admin.register(Queue)
class QueueAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Queues get their limits from code or ``pgqueue_queue configure``; here operators
    see them and pause or resume a queue (permission ``pause_queue``)."""

    list_display = (
        "name",
        "concurrency",
        "key_concurrency",
        "rate",
        "key_rate",
        "running",
        "paused_at",
        "source",
    )
    readonly_fields = (
        "name",
        "concurrency",
        "key_concurrency",
        "rate_limit",
        "rate_period",
        "key_rate_limit",
        "key_rate_period",
        "source",
        "overridden_at",
        "paused_at",
        "created_at",
        "updated_at",
    )
    actions = ("pause_queues", "resume_queues")

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_pgqueue.pause_queue")

    @admin.display(description=_("rate limit"))
    def rate(self, obj: Queue) -> str:
        return f"{obj.rate_limit} / {obj.rate_period} s" if obj.rate_limit else "—"

    @admin.display(description=_("rate limit per key"))
    def key_rate(self, obj: Queue) -> str:
        return f"{obj.key_rate_limit} / {obj.key_rate_period} s" if obj.key_rate_limit else "—"

    @admin.display(description=_("limits from"))
    def source(self, obj: Queue) -> str:
        """Whether the limits are an operator's run-time change (which wins over the
        settings until reset) or PGQUEUE['QUEUES']'s."""
        if obj.overridden_at is not None:
            return str(_("run time (overrides settings)"))
        return str(_("settings")) if obj.name in get_settings().QUEUES else "—"

    @admin.display(description=_("running"))
    def running(self, obj: Queue) -> int:
        state = queues.get(obj.name)
        return state.running if state else 0

    @admin.action(description=_("Pause the selected queues"), permissions=["pause"])
    def pause_queues(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        names = list(queryset.values_list("name", flat=True))
        for name in names:
            queues.pause(name)
        self._done(request, names, "paused")

    @admin.action(description=_("Resume the selected queues"), permissions=["pause"])
    def resume_queues(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        names = [name for name in queryset.values_list("name", flat=True) if queues.resume(name)]
        self._done(request, names, "resumed")

    def _done(self, request: HttpRequest, names: list[Any], verb: str) -> None:
        log_changes(request, Queue, dict.fromkeys(names, f"Queue {verb}."))
        self.message_user(request, f"{len(names)} queue(s) {verb}.", messages.SUCCESS)
