"""``POST /events`` and ``POST /events/batch``: commit, then 202.

The event and every delivery it fans out to are written by ``record_event`` (the
code of ``send_event``) in one transaction; the answer is built only after that
transaction has committed, so a 2xx always means "stored". With an idempotency key
(field or ``Idempotency-Key`` header) a repeat of the same request gets the same
answer, with ``Idempotent-Replayed: true``, and creates nothing; the event table's
unique constraint on the key decides between concurrent repeats. The same key with
another request is a 409.

A field ``send_event`` refuses is a 422 naming it (``errors``: ``event_type``, or
``events[2].event_type`` in a batch): the checks are ``send_event``'s own, called
here first so the answer can say which field broke which rule.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.http import HttpRequest, HttpResponse

from ..conf import get_settings
from ..exceptions import (
    IdempotencyKeyConflict,
    PayloadNotJSON,
    PayloadTooLarge,
    UnknownApplication,
)
from ..models.webhooks import Delivery, Event
from ..webhooks.fanout import (
    check_event_type,
    check_idempotency_key,
    record_event,
    serialize_payload,
)
from ..webhooks.routing import check_channels
from .http import ApiError, Principal, check_fields, invalid_fields, read_json, respond

#: The answer to a repeat of a request with the same idempotency key.
REPLAYED_HEADER = "Idempotent-Replayed"

EVENT_FIELDS = (
    "event_type",
    "payload",
    "application",
    "channels",
    "idempotency_key",
    "ordering_key",
)


def _field(where: str, name: str) -> str:
    """A field's name in an answer: ``event_type``, or ``events[2].event_type``."""
    return name if where == "event" else f"{where}.{name}"


def _check_each_field(request: dict[str, Any], where: str) -> None:
    """422 naming the first field ``send_event`` would refuse (its own checks)."""
    checks = (
        ("event_type", check_event_type),
        ("channels", check_channels),
        ("idempotency_key", check_idempotency_key),
        ("ordering_key", lambda key: check_idempotency_key(key, "ordering_key")),
    )
    for name, check in checks:
        try:
            check(request[name])
        except (TypeError, ValueError) as exc:
            raise invalid_fields({_field(where, name): [str(exc)]}) from None


def _request_of(
    body: Any, principal: Principal, header_key: str | None, where: str
) -> dict[str, Any]:
    """The keyword arguments of ``record_event`` for one event of the request."""
    if not isinstance(body, dict):
        raise ApiError("validation_error", f"{where}: an event must be a JSON object.")
    check_fields(body, EVENT_FIELDS, required=("event_type", "payload"))
    key = body.get("idempotency_key")
    if header_key is not None:
        if key is not None and key != header_key:
            raise ApiError(
                "validation_error",
                "The Idempotency-Key header and the idempotency_key field differ; send one.",
            )
        key = header_key
    application = body.get("application")
    if principal.application_uid is not None:
        if application is not None and application != principal.application_uid:
            raise ApiError("forbidden", "This API key may only send events of its own application.")
        application = principal.application_uid
    request = {
        "event_type": body["event_type"],
        "payload": body["payload"],
        "application": application,
        "channels": body.get("channels"),
        "idempotency_key": key,
        "ordering_key": body.get("ordering_key"),
    }
    _check_each_field(request, where)
    return request


def _record(request: dict[str, Any], where: str) -> tuple[dict[str, Any], bool]:
    """Write one event (its own transaction, or a savepoint of the batch's); its
    representation, and whether it is a replay (the key's event already existed)."""
    try:
        event, queued = record_event(**request)
        replayed = queued is None
        if queued is None:
            _check_same_request(event, request)
            queued = Delivery.objects.using(get_settings().DATABASE).filter(event=event).count()
    except IdempotencyKeyConflict:
        raise ApiError(
            "idempotency_conflict",
            f"{where}: idempotency key {request['idempotency_key']!r} was already used for "
            f"another request.",
        ) from None
    except UnknownApplication:
        raise ApiError(
            "validation_error",
            f"{where}: no active application with uid {request['application']!r}.",
            errors={"application": ["No active application with this uid."]},
        ) from None
    except PayloadTooLarge as exc:
        raise ApiError("too_large", f"{where}: {exc}") from None
    except PayloadNotJSON as exc:
        raise invalid_fields({_field(where, "payload"): [str(exc)]}) from None
    except (TypeError, ValueError) as exc:  # send_event's checks, made before any SQL
        raise ApiError("validation_error", f"{where}: {exc}") from None
    return {
        "id": event.pk,
        "webhook_id": event.msg_id,
        "event_type": event.event_type,
        "application": request["application"],
        "channels": list(event.channels),
        "idempotency_key": event.idempotency_key,
        "ordering_key": event.ordering_key,
        "created_at": event.created_at,
        "deliveries": queued,
    }, replayed


def _check_same_request(event: Event, request: dict[str, Any]) -> None:
    """A repeat must be the same request: every field ``record_event`` stores (the type,
    the payload's bytes, the channels and the ordering key; ``record_event`` itself
    refuses another application) is the same."""
    same = (
        event.event_type == request["event_type"]
        and event.body == serialize_payload(request["payload"])
        and list(event.channels) == check_channels(request["channels"])
        and event.ordering_key == request["ordering_key"]
    )
    if not same:
        raise ApiError(
            "idempotency_conflict",
            f"Idempotency key {request['idempotency_key']!r} was used for a different "
            f"request (event {event.msg_id}); use a new key for a new event.",
        )


def create_event(request: HttpRequest, principal: Principal) -> HttpResponse:
    body = read_json(request, check_document=False)
    event_request = _request_of(body, principal, request.headers.get("Idempotency-Key"), "event")
    # record_event's own atomic block is the transaction (no savepoint round trips):
    # it has committed when _record returns, so the client is told only then.
    result, replayed = _record(event_request, "event")
    return respond(result, status=202, headers=_replay_headers([replayed]))


def _replay_headers(replayed: list[bool]) -> dict[str, str]:
    # Only when nothing was created: a batch with one new event is not a replay.
    return {REPLAYED_HEADER: "true"} if all(replayed) else {}


def create_events(request: HttpRequest, principal: Principal) -> HttpResponse:
    body = read_json(request, check_document=False)
    check_fields(body, ("events",), required=("events",))
    items = body["events"]
    most = get_settings().API["MAX_BATCH"]
    if not isinstance(items, list) or not 1 <= len(items) <= most:
        raise ApiError(
            "validation_error",
            f"events must be a list of 1 to {most} events (PGQUEUE['API']['MAX_BATCH']).",
        )
    requests = [
        _request_of(item, principal, None, f"events[{index}]") for index, item in enumerate(items)
    ]
    with transaction.atomic(using=get_settings().DATABASE):
        recorded = [_record(item, f"events[{index}]") for index, item in enumerate(requests)]
    return respond(
        {"events": [result for result, _ in recorded]},
        status=202,
        headers=_replay_headers([replayed for _, replayed in recorded]),
    )
