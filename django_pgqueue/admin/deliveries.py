"""Admin for webhook events and deliveries (with their attempt log)."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from ..models.webhooks import Delivery, DeliveryAttempt, Event
from ..operations import DELIVERY_OPERATIONS
from ..webhooks.breaker import refused_by_configuration
from ..webhooks.destinations import refusal_detail_now
from ..webhooks.transport import TransportResult
from .dashboard import endpoint_label
from .display import WhenDatesMixin, first_line, json_display, pretty_json, status_badge, when
from .filters import EndpointFilter, RecentValuesFilter, StatusFilter, application_filter
from .paginator import EstimatedCountPaginator
from .queue_rows import QueueRowAdmin
from .read_only import ReadOnlyAdminMixin


def _admin_link(obj, text) -> str:
    opts = obj._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=(obj.pk,))
    return format_html('<a href="{}">{}</a>', url, text)


class DeliveryAttemptInline(WhenDatesMixin, admin.TabularInline):
    """Every HTTP attempt of the delivery, newest first."""

    model = DeliveryAttempt
    extra = 0
    can_delete = False
    show_change_link = False
    fields = (
        "attempt",
        "started_at",
        "duration_ms",
        "status_code",
        "error_display",
        "request",
        "response",
        "worker_id",
    )
    readonly_fields = fields
    verbose_name_plural = _("attempts (newest first)")

    def get_queryset(self, request):
        return super().get_queryset(request).order_by("-id")

    # Whoever may see the delivery sees its attempt log.
    def has_view_permission(self, request, obj=None) -> bool:
        return request.user.has_perm("django_pgqueue.view_delivery")

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description=_("error"))
    def error_display(self, obj: DeliveryAttempt):
        """The stored error, and for an SSRF refusal the operator's detail.

        The stored text is the customer's (the portal and the API show it): it never
        says what the host resolved to or which setting would allow it. The detail is
        worked out again from the endpoint's URL, with today's DNS and settings, once
        per URL and page.
        """
        if not refused_by_configuration(TransportResult(error=obj.error)):
            return obj.error
        url = obj.delivery.endpoint.url
        details: dict[str, str] = self.__dict__.setdefault("_refusal_details", {})
        if url not in details:
            details[url] = refusal_detail_now(url)
        return format_html(
            '{}<br><span class="pgq-muted">{} {}</span>',
            obj.error,
            _("Checked now:"),
            details[url],
        )

    @admin.display(description=_("request headers"))
    def request(self, obj: DeliveryAttempt):
        # As sent, credential values already redacted when the attempt was recorded.
        return pretty_json(obj.request_headers or None)

    @admin.display(description=_("response"))
    def response(self, obj: DeliveryAttempt):
        more = " …" if obj.response_truncated else ""
        return format_html(
            '<pre class="pgq-json">{}{}</pre>{}',
            obj.response_body or "—",
            more,
            pretty_json(obj.response_headers) if obj.response_headers else "",
        )


@admin.register(Delivery)
class DeliveryAdmin(QueueRowAdmin):
    operations = DELIVERY_OPERATIONS
    list_display = (
        "id",
        "event_link",
        "event_type",
        "endpoint_link",
        "status_display",
        "attempts_display",
        "next_attempt_display",
        "created_at",
        "last_error_line",
    )
    list_display_links = ("id",)
    list_select_related = ("event", "endpoint", "endpoint__application")
    list_filter = (
        StatusFilter,
        application_filter("endpoint__application"),
        ("endpoint", EndpointFilter),
        ("event__event_type", RecentValuesFilter),
        "created_at",
    )
    search_fields = (
        "endpoint__url",
        "event__event_type",
        "=event__idempotency_key",
        "=event__msg_id",
    )
    search_help_text = _(
        "A delivery id, an endpoint URL, an event type, an idempotency key or msg id."
    )
    inlines = (DeliveryAttemptInline,)
    fieldsets = (
        (
            None,
            {"fields": ("id", "event_link", "event_type", "endpoint_link", "status_display")},
        ),
        (
            _("Scheduling"),
            {
                "fields": (
                    "attempts_display",
                    "next_attempt_display",
                    "lease",
                    "worker_id",
                    "created_at",
                    "last_attempted_at",
                    "finished_at",
                )
            },
        ),
        (_("Payload"), {"fields": ("idempotency_key_display", "payload_json")}),
        # The history is the attempt log below (one row per attempt, with the
        # response); deliveries have no JSON error list of their own.
        (_("Errors"), {"fields": ("last_error_pre",)}),
    )
    # The stub wants each fieldset's options as its TypedDict; the literal is a plain dict.
    readonly_fields = flatten_fieldsets(fieldsets)  # type: ignore[arg-type]

    def get_queryset(self, request):
        qs = super().get_queryset(request).select_related("event", "endpoint__application")
        url_name = getattr(request.resolver_match, "url_name", "") or ""
        if url_name.endswith("_changelist"):
            qs = qs.defer("event__payload", "event__body")
        return qs

    @admin.display(description=_("status"), ordering="status")
    def status_display(self, obj: Delivery):
        # A parked delivery is pending in the table, but it waits for an operator (to
        # enable its endpoint), not for a worker: the badge says which.
        if obj.is_parked:
            return status_badge("parked", _("Parked"))
        return super().status_display(obj)

    @admin.display(description=_("next attempt at"), ordering="next_attempt_at")
    def next_attempt_display(self, obj: Delivery):
        if obj.is_parked:
            return format_html(
                '<span class="pgq-muted">{}</span>', _("parked: the endpoint is disabled")
            )
        return when(obj.next_attempt_at)

    @admin.display(description=_("event"), ordering="event_id")
    def event_link(self, obj: Delivery):
        return _admin_link(obj.event, f"#{obj.event_id} {obj.event.msg_id}")

    @admin.display(description=_("event type"))
    def event_type(self, obj: Delivery) -> str:
        return obj.event.event_type

    @admin.display(description=_("endpoint"), ordering="endpoint_id")
    def endpoint_link(self, obj: Delivery):
        endpoint = obj.endpoint
        app = endpoint.application.uid if endpoint.application else None
        return _admin_link(
            endpoint, endpoint_label(endpoint.pk, first_line(endpoint.display_url, 60), app)
        )

    @admin.display(description=_("idempotency key (header)"))
    def idempotency_key_display(self, obj: Delivery) -> str:
        return obj.idempotency_key

    @admin.display(description=_("payload"))
    def payload_json(self, obj: Delivery):
        return pretty_json(obj.event.payload)


@admin.register(Event)
class EventAdmin(WhenDatesMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Events are history: read-only (deleting one would delete its deliveries'
    history), linked to their deliveries."""

    list_display = (
        "id",
        "event_type",
        "application",
        "msg_id",
        "idempotency_key",
        "created_at",
        "deliveries",
    )
    list_filter = (
        application_filter("application"),
        ("event_type", RecentValuesFilter),
        "created_at",
    )
    list_select_related = ("application",)
    search_fields = ("event_type", "=idempotency_key", "=msg_id")
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    ordering = ("-id",)
    fields = (
        "id",
        "event_type",
        "application",
        "channels",
        "msg_id",
        "idempotency_key",
        "created_at",
        "deliveries",
        "payload_json",
    )
    readonly_fields = fields

    payload_json = json_display("payload", _("payload"))

    @admin.display(description=_("deliveries"))
    def deliveries(self, obj: Event):
        url = reverse("admin:django_pgqueue_delivery_changelist")
        return format_html('<a href="{}?event__id__exact={}">{}</a>', url, obj.pk, _("deliveries"))
