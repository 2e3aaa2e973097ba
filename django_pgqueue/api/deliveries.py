"""``/deliveries``: list with filters and a cursor, one with its attempts, replay one
or many (``operations.replay``: the admin's and the portal's operation)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse

from .. import operations
from ..conf import get_settings
from ..models.queue import Status
from ..models.webhooks import Delivery
from ..webhooks.routing import EVENT_TYPE_PATTERN
from . import scoping
from .endpoints import operation_result, record_replays
from .http import ApiError, Principal, check_fields, paginate, query_int, read_json, respond


def render(delivery: Delivery) -> dict[str, Any]:
    application = delivery.endpoint.application
    return {
        "id": delivery.pk,
        "event_id": delivery.event_id,
        "webhook_id": delivery.event.msg_id,
        "event_type": delivery.event.event_type,
        "endpoint_id": delivery.endpoint_id,
        "application": application.uid if application else None,
        "status": delivery.status,
        "attempts": delivery.attempts,
        "max_attempts": delivery.max_attempts,
        "next_attempt_at": delivery.next_attempt_at,
        "last_error": delivery.last_error,
        "created_at": delivery.created_at,
        "updated_at": delivery.updated_at,
        "finished_at": delivery.finished_at,
    }


def list_deliveries(request: HttpRequest, principal: Principal) -> HttpResponse:
    queryset = scoping.deliveries(principal, request)
    query = request.GET
    status = query.get("status")
    if status is not None:
        if status not in Status.values:
            raise ApiError(
                "invalid_parameter", f"status must be one of {', '.join(Status.values)}."
            )
        queryset = queryset.filter(status=status)
    endpoint = query_int(request, "endpoint", minimum=1, maximum=scoping.MAX_ID)
    if endpoint is not None:
        queryset = queryset.filter(endpoint_id=endpoint)
    event_type = query.get("event_type")
    if event_type is not None:
        if not EVENT_TYPE_PATTERN.fullmatch(event_type):
            raise ApiError("invalid_parameter", f"event_type {event_type!r} is not an event type.")
        queryset = queryset.filter(event__event_type=event_type)
    if "since" in query:
        queryset = queryset.filter(created_at__gte=scoping.parse_time(query["since"], "since"))
    if "until" in query:
        queryset = queryset.filter(created_at__lt=scoping.parse_time(query["until"], "until"))
    return paginate(request, queryset, render, newest_first=True)


def get_delivery(request: HttpRequest, principal: Principal, pk: str) -> HttpResponse:
    delivery = scoping.get(scoping.deliveries(principal), "delivery", pk=scoping.object_id(pk))
    attempts = [
        {
            "attempt": a.attempt,
            "started_at": a.started_at,
            "duration_ms": a.duration_ms,
            "status_code": a.status_code,
            "request_headers": a.request_headers,
            "response_headers": a.response_headers,
            "response_body": a.response_body,
            "response_truncated": a.response_truncated,
            "error": a.error,
        }
        for a in delivery.attempts_log.using(get_settings().DATABASE).order_by("id")
    ]
    return respond(
        {**render(delivery), "payload": delivery.event.payload, "attempts_log": attempts}
    )


def replay_delivery(request: HttpRequest, principal: Principal, pk: str) -> HttpResponse:
    delivery = scoping.get(scoping.deliveries(principal), "delivery", pk=scoping.object_id(pk))
    result = operations.replay(Delivery, [delivery.pk], actor=principal)
    return respond(operation_result(record_replays(principal, result)))


def replay_deliveries(request: HttpRequest, principal: Principal) -> HttpResponse:
    body = read_json(request)
    check_fields(body, ("ids",), required=("ids",))
    ids = body["ids"]
    most = get_settings().API["MAX_BATCH"]
    if (
        not isinstance(ids, list)
        or not 1 <= len(ids) <= most
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
    ):
        raise ApiError(
            "validation_error",
            f"ids must be a list of 1 to {most} delivery ids (PGQUEUE['API']['MAX_BATCH']).",
        )
    wanted = {i for i in ids if 1 <= i <= scoping.MAX_ID}
    # Only the key's own deliveries are replayed; others are "not found", whoever owns them.
    visible = set(scoping.deliveries(principal).filter(pk__in=wanted).values_list("pk", flat=True))
    result = record_replays(
        principal, operations.replay(Delivery, sorted(visible), actor=principal)
    )
    for pk in set(ids) - visible:
        result.skipped[pk] = "not found"
    return respond(operation_result(result))
