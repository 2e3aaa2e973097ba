"""Admin for webhook endpoints: masked secrets and the operator switches.

Every switch needs ``django_pgqueue.manage_endpoint``: enable, disable, reset the
circuit, rotate the secret (the old one keeps signing for the grace period),
send a test event, replay failed/dead deliveries since a time, reveal the secret.
Flow control (in-flight limit, rate limit, FIFO ordering) is edited on the change
form; the list and the page show deliveries in flight against the limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.db import models
from django.db.models import Count, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from .. import storage
from ..conf import get_settings
from ..models.queue import Status
from ..models.webhooks import BreakerState, Delivery, Endpoint
from .audit import log_changes, report
from .display import json_display
from .filters import application_filter
from .row_actions import RowActionsAdmin, row_action

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

MASK = "whsec_" + "•" * 12


@dataclass(frozen=True)
class EndpointSwitch:
    """One operator switch: labels, and which endpoints it applies to."""

    name: str
    label: StrOrPromise
    done: StrOrPromise
    explanation: StrOrPromise

    def applies(self, endpoint: Endpoint) -> bool:
        if self.name == "enable":
            return not endpoint.is_active or endpoint.breaker_state != BreakerState.CLOSED
        if self.name == "disable":
            return endpoint.is_active
        if self.name == "reset_circuit":
            return (
                endpoint.breaker_state != BreakerState.CLOSED or endpoint.consecutive_failures > 0
            )
        return True


SWITCHES = {
    s.name: s
    for s in (
        EndpointSwitch(
            "enable",
            _("Enable"),
            "Enabled",
            _("Deliveries go out again; the circuit is closed and its counters reset."),
        ),
        EndpointSwitch(
            "disable",
            _("Disable"),
            "Disabled",
            _("No new deliveries are queued and nothing is sent until it is enabled again."),
        ),
        EndpointSwitch(
            "reset_circuit",
            _("Reset circuit"),
            "Circuit reset",
            _("Closes the circuit breaker now instead of waiting for its next probe."),
        ),
    )
}


class ReplaySinceForm(forms.Form):
    since = forms.DateTimeField(
        label=_("Replay failed and dead deliveries created since"),
        help_text=_("Date and time (UTC), e.g. 2026-01-31 08:00."),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["since"].initial = (timezone.now() - timedelta(hours=24)).replace(microsecond=0)


def _switch_button(name: str):
    switch = SWITCHES[name]

    def view(self: EndpointAdmin, request: HttpRequest, pk: int) -> HttpResponse:
        return self.confirmed_row_view(
            request,
            pk,
            label=switch.label,
            explanation=switch.explanation,
            applies=switch.applies,
            act=lambda obj, data: self.apply_switch(request, name, [obj.pk]),
        )

    view.__name__ = f"pgqueue_endpoint_{name}"
    return row_action(
        switch.label, name.replace("_", "-"), permission="manage", applies=switch.applies
    )(view)


def _bulk_switch(name: str):
    switch = SWITCHES[name]

    @admin.action(permissions=["manage"], description=_("%s selected endpoints") % switch.label)
    def action(self: EndpointAdmin, request: HttpRequest, queryset: QuerySet):
        return self.confirm_bulk(
            request,
            queryset,
            name,
            label=switch.label,
            explanation=switch.explanation,
            apply=lambda ids: self.apply_switch(request, name, ids),
        )

    action.__name__ = name
    return action


ENDPOINT_BUTTONS = (
    "pgqueue_endpoint_enable",
    "pgqueue_endpoint_disable",
    "pgqueue_endpoint_reset_circuit",
    "pgqueue_endpoint_send_test_event",
)


@admin.register(Endpoint)
class EndpointAdmin(RowActionsAdmin):
    list_display = (
        "id",
        "url",
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
    fields = (
        "url",
        "application",
        "description",
        "event_types",
        "channels",
        "headers",
        "is_active",
        "max_in_flight",
        "rate_limit",
        "rate_period",
        "ordering",
    )
    readonly_fields = (
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
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    action_permission = "manage"
    actions = ["enable", "disable", "reset_circuit", "rotate_secret", "send_test_event"]
    actions_row = ENDPOINT_BUTTONS
    actions_detail = (
        *ENDPOINT_BUTTONS,
        "pgqueue_endpoint_rotate_secret",
        "pgqueue_endpoint_replay_failed",
        "pgqueue_endpoint_reveal_secret",
    )

    def get_fields(self, request, obj=None):
        if obj is None:
            return self.fields
        return (*self.fields, *self.readonly_fields)

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

    def has_manage_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_pgqueue.manage_endpoint")

    # ----- columns ----------------------------------------------------------

    @admin.display(description=_("secret"))
    def secret_masked(self, obj: Endpoint) -> str:
        return MASK if obj.secret_ciphertext else "—"

    @admin.display(description=_("secrets still signing after a rotation"))
    def previous_secrets_count(self, obj: Endpoint) -> int:
        now = timezone.now()
        return sum(
            1  # type: ignore[misc]  # mypy matches this generator to sum's bool overload
            for e in obj.previous_secrets
            # django.utils.timezone imports datetime; its stub does not re-export it.
            if timezone.datetime.fromisoformat(e["expires_at"]) > now  # type: ignore[attr-defined]
        )

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

    # ----- operations ---------------------------------------------------------

    def apply_switch(self, request: HttpRequest, name: str, ids: list[int]) -> None:
        switch = SWITCHES[name]
        result = storage.apply_endpoint_operation(name, ids)
        log_changes(
            request,
            Endpoint,
            {pk: f"{switch.label} (was {old})" for pk, old in result.changed.items()},
        )
        report(self, request, switch.done, result.changed, result.skipped)

    def rotate_secrets(self, request: HttpRequest, endpoints: list[Endpoint]) -> None:
        grace = get_settings().WEBHOOKS["SECRET_ROTATION_GRACE"]
        for endpoint in endpoints:
            endpoint.rotate_secret()
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
            f"Secret rotated (the old one keeps signing for {hours:g} h)",
            [e.pk for e in endpoints],
            {},
        )

    def send_test_events(self, request: HttpRequest, endpoints: list[Endpoint]) -> None:
        deliveries = {
            e.pk: storage.send_test_event(e, sent_by=request.user.get_username()) for e in endpoints
        }
        log_changes(
            request,
            Endpoint,
            {pk: f"Sent a test event (delivery #{d.pk})" for pk, d in deliveries.items()},
        )
        report(self, request, "Test event queued", list(deliveries), {})

    def replay_failed(self, request: HttpRequest, endpoint: Endpoint, since) -> None:
        result = storage.replay_endpoint_deliveries(endpoint.pk, since)
        log_changes(
            request,
            Delivery,
            {
                pk: f"Replay: {old} -> pending (endpoint replay since {since:%Y-%m-%d %H:%M})"
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
        report(self, request, "Replayed deliveries", result.changed, result.skipped)
        if not result.changed and not result.skipped:
            self.message_user(request, "No failed or dead delivery since then.", messages.INFO)

    # ----- buttons (GET confirms, POST acts) ------------------------------------

    pgqueue_endpoint_enable = _switch_button("enable")
    pgqueue_endpoint_disable = _switch_button("disable")
    pgqueue_endpoint_reset_circuit = _switch_button("reset_circuit")

    @row_action(_("Send test event"), "send-test-event", permission="manage")
    def pgqueue_endpoint_send_test_event(self, request: HttpRequest, pk: int) -> HttpResponse:
        return self.confirmed_row_view(
            request,
            pk,
            label=_("Send test event"),
            explanation=_("Queues one pgqueue.test event to this endpoint only, tried once."),
            act=lambda obj, data: self.send_test_events(request, [obj]),
        )

    @row_action(_("Rotate secret"), "rotate-secret", permission="manage")
    def pgqueue_endpoint_rotate_secret(self, request: HttpRequest, pk: int) -> HttpResponse:
        return self.confirmed_row_view(
            request,
            pk,
            label=_("Rotate secret"),
            explanation=_(
                "A new signing secret is made current; the old one keeps signing (both "
                "signatures are sent) for PGQUEUE['WEBHOOKS']['SECRET_ROTATION_GRACE']."
            ),
            act=lambda obj, data: self.rotate_secrets(request, [obj]),
        )

    @row_action(_("Replay failed since…"), "replay-failed", permission="manage")
    def pgqueue_endpoint_replay_failed(self, request: HttpRequest, pk: int) -> HttpResponse:
        return self.confirmed_row_view(
            request,
            pk,
            label=_("Replay failed and dead deliveries"),
            explanation=_(
                "Every failed or dead delivery to this endpoint created since the time "
                "below goes back to pending, due now. Rows a worker holds are skipped."
            ),
            form_class=ReplaySinceForm,
            act=lambda obj, data: self.replay_failed(request, obj, data["since"]),
        )

    @row_action(_("Reveal secret"), "reveal-secret", permission="manage")
    def pgqueue_endpoint_reveal_secret(self, request: HttpRequest, pk: int) -> HttpResponse:
        def reveal(obj: Endpoint, data: dict[str, Any]) -> HttpResponse:
            log_changes(request, Endpoint, {obj.pk: "Revealed the signing secret"})
            context = {
                **self.admin_site.each_context(request),
                "title": _("Signing secret"),
                "opts": self.model._meta,
                "object": obj,
                "secret": obj.secret,
                "previous_count": self.previous_secrets_count(obj),
            }
            response = TemplateResponse(
                request, "admin/django_pgqueue/endpoint_secret.html", context
            )
            response["Cache-Control"] = "no-store"
            return response

        return self.confirmed_row_view(
            request,
            pk,
            label=_("Reveal secret"),
            explanation=_("Shows the signing secret once; the view is written to the admin log."),
            act=reveal,
        )

    # ----- bulk actions ---------------------------------------------------------

    enable = _bulk_switch("enable")
    disable = _bulk_switch("disable")
    reset_circuit = _bulk_switch("reset_circuit")

    @admin.action(permissions=["manage"], description=_("Rotate secrets of selected endpoints"))
    def rotate_secret(self, request: HttpRequest, queryset: QuerySet):
        return self.confirm_bulk(
            request,
            queryset,
            "rotate_secret",
            label=_("Rotate secret"),
            explanation=_(
                "Each selected endpoint gets a new secret; the old ones keep signing "
                "for the grace period."
            ),
            apply=lambda ids: self.rotate_secrets(
                request, list(Endpoint.objects.filter(pk__in=ids))
            ),
        )

    @admin.action(permissions=["manage"], description=_("Send a test event to selected endpoints"))
    def send_test_event(self, request: HttpRequest, queryset: QuerySet):
        return self.confirm_bulk(
            request,
            queryset,
            "send_test_event",
            label=_("Send test event"),
            explanation=_("Queues one pgqueue.test event to each selected endpoint, tried once."),
            apply=lambda ids: self.send_test_events(
                request, list(Endpoint.objects.filter(pk__in=ids))
            ),
        )
