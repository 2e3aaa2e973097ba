"""Admin for webhook endpoints: masked secrets and the operator switches.

The operations (``django_pgqueue.operations.ENDPOINT_OPERATIONS``, each with its
permission): enable, disable, reset the circuit, send a test event
(``manage_endpoint``); rotate the secret (the old one keeps signing for the grace
period) and reveal it (``manage_endpoint_secret``); replay failed/dead deliveries
since a time (``replay_delivery``). Whether an endpoint is enabled is not a form
field: only the enable and disable operations change it. Flow control (in-flight
limit, rate limit, FIFO ordering) is edited on the change form; the list and the
page show deliveries in flight against the limit.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.widgets import AdminURLFieldWidget
from django.db import models
from django.db.models import Count, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from ..conf import get_settings
from ..models.queue import Status
from ..models.webhooks import BreakerState, Delivery, Endpoint, MaskedURLMixin
from ..operations import (
    DELIVERY_OPERATIONS,
    ENDPOINT_OPERATIONS,
    EndpointOperation,
    Operation,
    apply_endpoint_operation,
    replay_endpoint_deliveries,
    rotate_secret,
    send_test_event,
)
from ..webhooks import store
from ..webhooks.crypto import unexpired_previous
from .audit import log_changes, report
from .display import WhenDatesMixin, json_display
from .filters import application_filter
from .row_actions import RowActionsAdmin

MASK = "whsec_" + "•" * 12


def _previous_signing(obj: Endpoint) -> int | None:
    """How many previous secrets still sign; None when the column is malformed."""
    try:
        return len(unexpired_previous(obj.previous_secrets, timezone.now(), what="-"))
    except ValueError:
        return None


class ReplaySinceForm(forms.Form):
    since = forms.DateTimeField(
        label=_("Replay failed and dead deliveries created since"),
        help_text=_("Date and time (UTC), e.g. 2026-01-31 08:00."),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["since"].initial = (timezone.now() - timedelta(hours=24)).replace(microsecond=0)


class MaskedAdminURLWidget(MaskedURLMixin, AdminURLFieldWidget):
    """The admin's URL input (with its "Currently" link), a broker URL's password
    shown as ``***``: stored, or typed into a form refused for another field."""


@admin.register(Endpoint)
class EndpointAdmin(WhenDatesMixin, RowActionsAdmin):
    list_display = (
        "id",
        "destination",
        "application",
        "is_active",
        "circuit",
        "consecutive_failures",
        "failing_since",
        "last_success_at",
        "in_flight",
        "rate",
        "secret_masked",
    )
    list_filter = (application_filter("application"), "is_active", "breaker_state", "ordering")
    list_select_related = ("application",)
    autocomplete_fields = ("application",)
    search_fields = ("url", "description")
    ordering = ("id",)
    show_full_result_count = False
    # The form edits the configuration, what ``Endpoint.save()`` writes (``updated_at``
    # aside, which the save stamps).
    fields = tuple(name for name in Endpoint.CONFIG_FIELDS if name != "updated_at")
    # Enabled or not is changed only by the enable and disable operations
    # (``manage_endpoint``, audited), never by the form.
    readonly_fields = (
        "is_active",
        "in_flight",
        "rate",
        "secret_masked",
        "previous_secrets_count",
        "circuit",
        "consecutive_failures",
        "open_until",
        "failing_since",
        "last_success_at",
        "disabled_at",
        "disabled_reason",
        "headers_json",
    )
    # Receivers are https unless PGQUEUE["WEBHOOKS"]["ALLOW_HTTP"]; a bare host means https.
    formfield_overrides = {
        models.URLField: {"assume_scheme": "https", "widget": MaskedAdminURLWidget}
    }
    operations = ENDPOINT_OPERATIONS
    detail_only = ("rotate_secret", "replay_failed", "reveal_secret")
    operation_forms = {"replay_failed": ReplaySinceForm}

    @admin.display(description=_("URL"), ordering="url")
    def destination(self, obj: Endpoint) -> str:
        return obj.display_url

    def get_fields(self, request, obj=None):
        if obj is None:
            return self.fields
        return (*self.fields, *self.readonly_fields)

    # ----- writes: the webhook store's ---------------------------------------------

    def save_model(self, request: HttpRequest, obj: Endpoint, form: Any, change: bool) -> None:
        # The configuration only: a breaker trip or a 410 while the form was being
        # validated is kept.
        store.save_endpoint(obj)

    def get_deleted_objects(self, objs: Any, request: Any) -> Any:
        # The store deletes the deliveries with it: their read-only admin must not
        # forbid it.
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        return deleted, counts, store.deletion_permissions_needed(perms_needed), protected

    def delete_model(self, request: HttpRequest, obj: Endpoint) -> None:
        store.delete_endpoints([obj.pk])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        store.delete_endpoints(queryset.values_list("pk", flat=True))

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        # One small subquery per endpoint through pgq_dlv_flight_idx (in-flight rows
        # only), not a join over every delivery an endpoint ever had.
        in_flight = (
            Delivery.objects.filter(endpoint=OuterRef("pk"), status=Status.IN_PROGRESS)
            .order_by()
            .values("endpoint")
            .annotate(n=Count("id"))
            .values("n")
        )
        return (
            super()
            .get_queryset(request)
            .annotate(in_flight_count=Coalesce(Subquery(in_flight), Value(0)))
        )

    # ----- columns ----------------------------------------------------------

    @admin.display(description=_("secret"))
    def secret_masked(self, obj: Endpoint) -> str:
        return MASK if obj.secret_ciphertext else "—"

    @admin.display(description=_("secrets still signing after a rotation"))
    def previous_secrets_count(self, obj: Endpoint) -> Any:
        signing = _previous_signing(obj)
        # Written by SQL in another shape, they sign nothing; a rotation replaces them.
        return _("invalid (rotate the secret)") if signing is None else signing

    @admin.display(description=_("circuit"), ordering="breaker_state")
    def circuit(self, obj: Endpoint):
        css = "succeeded" if obj.breaker_state == BreakerState.CLOSED else "dead"
        return format_html(
            '<span class="pgq-status pgq-status-{}">{}</span>', css, obj.get_breaker_state_display()
        )

    @admin.display(description=_("in flight / limit"), ordering="in_flight_count")
    def in_flight(self, obj: Endpoint) -> str:
        """Deliveries in flight now, against the endpoint's limit (or the default)."""
        count = getattr(obj, "in_flight_count", None)
        if count is None:  # not from get_queryset (a new object)
            count = obj.deliveries.filter(status=Status.IN_PROGRESS).count() if obj.pk else 0
        limit = obj.max_in_flight
        if limit is None:
            default = get_settings().WEBHOOKS["MAX_IN_FLIGHT"]
            return f"{count} / {default} (default)" if default else f"{count} / no limit"
        return f"{count} / {limit}"

    @admin.display(description=_("rate limit"))
    def rate(self, obj: Endpoint) -> str:
        if obj.rate_limit is None:
            return "—"
        return f"{obj.rate_limit} {obj.get_rate_period_display()}"

    headers_json = json_display("headers", _("headers"))

    # ----- operations (buttons and bulk actions: RowActionsAdmin) ----------------

    def run_operation(
        self, request: HttpRequest, op: Operation, ids: list[int], data: dict[str, Any]
    ) -> HttpResponse | None:
        if isinstance(op, EndpointOperation) and op.set_clause:
            result = apply_endpoint_operation(op.name, ids)
            log_changes(
                request, Endpoint, {pk: op.audit(was) for pk, was in result.changed.items()}
            )
            report(self, request, op.done, result.changed, result.skipped)
            return None
        endpoints = list(Endpoint.objects.filter(pk__in=ids).order_by("pk"))
        handler = getattr(self, f"run_{op.name}")
        return handler(request, op, endpoints, data)

    def run_rotate_secret(
        self, request: HttpRequest, op: Operation, endpoints: list[Endpoint], data: dict[str, Any]
    ) -> None:
        grace = get_settings().WEBHOOKS["SECRET_ROTATION_GRACE"]
        for endpoint in endpoints:
            rotate_secret(endpoint, grace=grace)
        hours = grace / 3600
        log_changes(
            request,
            Endpoint,
            {
                e.pk: f"Rotated the signing secret (the old one signs for {hours:g} h)"
                for e in endpoints
            },
        )
        report(
            self,
            request,
            f"{op.done} (the old one keeps signing for {hours:g} h)",
            [e.pk for e in endpoints],
            {},
        )

    def run_send_test_event(
        self, request: HttpRequest, op: Operation, endpoints: list[Endpoint], data: dict[str, Any]
    ) -> None:
        # Who sent it is in the admin's log, never in what the receiver gets.
        sent = {e.pk: send_test_event(e) for e in endpoints}
        deliveries = {pk: d for pk, d in sent.items() if d is not None}
        log_changes(
            request,
            Endpoint,
            {pk: f"Sent a test event (delivery #{d.pk})" for pk, d in deliveries.items()},
        )
        skipped = {pk: "is disabled" for pk, d in sent.items() if d is None}
        report(self, request, op.done, list(deliveries), skipped)

    def run_replay_failed(
        self, request: HttpRequest, op: Operation, endpoints: list[Endpoint], data: dict[str, Any]
    ) -> None:
        since, replay = data["since"], DELIVERY_OPERATIONS["replay"]
        for endpoint in endpoints:
            result = replay_endpoint_deliveries(endpoint.pk, since)
            log_changes(
                request,
                Delivery,
                {
                    pk: f"{replay.audit(old)} (endpoint replay since {since:%Y-%m-%d %H:%M})"
                    for pk, old in result.changed.items()
                },
            )
            log_changes(
                request,
                Endpoint,
                {
                    endpoint.pk: f"Replayed {result.changed_count} failed/dead deliveries "
                    f"created since {since:%Y-%m-%d %H:%M}"
                },
            )
            report(self, request, op.done, result.changed, result.skipped)
            if not result.changed and not result.skipped:
                self.message_user(request, "No failed or dead delivery since then.", messages.INFO)

    def run_reveal_secret(
        self, request: HttpRequest, op: Operation, endpoints: list[Endpoint], data: dict[str, Any]
    ) -> HttpResponse:
        (obj,) = endpoints
        log_changes(request, Endpoint, {obj.pk: op.done})
        context = {
            **self.admin_site.each_context(request),
            "title": _("Signing secret"),
            "opts": self.model._meta,
            "object": obj,
            "secret": obj.secret,
            "previous_count": _previous_signing(obj) or 0,
        }
        response = TemplateResponse(request, "admin/django_pgqueue/endpoint_secret.html", context)
        response["Cache-Control"] = "no-store"
        return response
