"""The job queues' flow control in the admin: limits, pause state and running jobs,
read-only, with pause and resume actions and a "Change limits" page that call
``django_pgqueue.queues`` (the rows' one writer)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from .. import queues
from ..conf import get_settings
from ..models import Queue
from ..queue_limits import LIMIT_FIELDS
from .audit import log_changes
from .queue_limits_form import QueueLimitsForm
from .read_only import ReadOnlyAdminMixin


@admin.register(Queue)
class QueueAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Queues get their limits from settings, code, ``pgqueue_queue configure`` or the
    "Change limits" page (permission ``change_queue``); here operators see them and
    pause or resume a queue (permission ``pause_queue``)."""

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
    change_form_template = "admin/django_pgqueue/change_form.html"

    def has_limits_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_pgqueue.change_queue")

    def get_urls(self) -> list[URLPattern]:
        limits = path(
            "<path:object_id>/limits/",
            self.admin_site.admin_view(self.limits_view),
            name="django_pgqueue_queue_limits",
        )
        return [limits, *super().get_urls()]

    def get_list_display(self, request: HttpRequest) -> Any:
        shown = super().get_list_display(request)
        return (*shown, "limits_link") if self.has_limits_permission(request) else shown

    @admin.display(description=_("limits"))
    def limits_link(self, obj: Queue) -> str:
        url = reverse("admin:django_pgqueue_queue_limits", args=[quote(obj.pk)])
        return format_html('<a href="{}">{}</a>', url, _("Change limits"))

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        context["pgqueue_detail_actions"] = (
            [
                {
                    "path": reverse("admin:django_pgqueue_queue_limits", args=[quote(obj.pk)]),
                    "title": _("Change limits"),
                }
            ]
            if obj is not None and self.has_limits_permission(request)
            else []
        )
        return super().render_change_form(request, context, add, change, form_url, obj)

    def limits_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET shows queue ``object_id``'s limits as a form; POST (with CSRF) saves them
        through ``queues.configure`` or, with ``_reset``, hands the queue back to its
        settings through ``queues.reset``. A bad value re-renders the form with the
        field's error and writes nothing."""
        if not self.has_limits_permission(request):
            raise PermissionDenied
        name = unquote(object_id)
        try:
            state = queues.get(name)
        except ValueError:  # no queue can have this name (too long, a NUL): none has it
            state = None
        if state is None:
            raise Http404(f"No queue {name!r} is configured.")
        form = QueueLimitsForm(
            request.POST if request.method == "POST" else None, initial_limits=state.limits
        )
        if request.method == "POST" and "_reset" in request.POST:
            queues.reset(name)
            return self._limits_done(request, name, "Limits reset to settings")
        if request.method == "POST" and form.is_valid():
            limits = form.limits()
            queues.configure(name, **limits)
            described = ", ".join(f"{field}={limits[field]}" for field in LIMIT_FIELDS)
            return self._limits_done(request, name, f"Limits changed: {described}")
        context = {
            **self.admin_site.each_context(request),
            "title": _("Change limits of %(name)s") % {"name": name},
            "opts": self.model._meta,
            "object": Queue.objects.get(pk=name),
            "form": form,
            "source": state.source,
        }
        return TemplateResponse(request, "admin/django_pgqueue/queue/limits.html", context)

    def _limits_done(self, request: HttpRequest, name: str, message: str) -> HttpResponse:
        log_changes(request, Queue, {name: f"{message}."})  # type: ignore[dict-item]  # a queue's pk is its name
        self.message_user(request, f"Queue {name}: {message}.", messages.SUCCESS)
        return HttpResponseRedirect(
            reverse("admin:django_pgqueue_queue_change", args=[quote(name)])
        )

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
