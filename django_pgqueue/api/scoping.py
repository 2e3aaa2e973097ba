"""What one key may see: every query of the API starts here.

A key scoped to an application sees only that application's objects; an id of
another application's object is a 404, exactly like an id that does not exist. The
``?application=`` filter narrows further and never widens.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.utils.dateparse import parse_datetime

from ..conf import get_settings
from ..contract import BIGINT_MAX, strict_int
from ..models.webhooks import Application, Delivery, Endpoint, Event
from .http import ApiError, Principal

#: The largest id PostgreSQL's bigint holds: larger ones name nothing (and would
#: make the query fail).
MAX_ID = BIGINT_MAX


def object_id(value: Any, name: str = "id") -> int:
    """A path id (ASCII digits) or body id (an integer); 404 for one no row can have."""
    try:
        return strict_int(value, name, minimum=1)
    except ValueError:
        raise ApiError("not_found", f"No object with {name} {value!r}.") from None


def _application_filter(request: HttpRequest, principal: Principal, field: str) -> dict[str, Any]:
    filters: dict[str, Any] = {}
    if principal.application_id is not None:
        filters[f"{field}_id"] = principal.application_id
    uid = request.GET.get("application")
    if uid is not None:
        filters[f"{field}__uid"] = uid
    return filters


def endpoints(principal: Principal, request: HttpRequest | None = None) -> QuerySet[Endpoint]:
    queryset = Endpoint.objects.using(get_settings().DATABASE).select_related("application")
    if request is not None:
        return queryset.filter(**_application_filter(request, principal, "application"))
    if principal.application_id is not None:
        queryset = queryset.filter(application_id=principal.application_id)
    return queryset


def deliveries(principal: Principal, request: HttpRequest | None = None) -> QuerySet[Delivery]:
    queryset = Delivery.objects.using(get_settings().DATABASE).select_related(
        "event", "endpoint__application"
    )
    if request is not None:
        return queryset.filter(**_application_filter(request, principal, "endpoint__application"))
    if principal.application_id is not None:
        queryset = queryset.filter(endpoint__application_id=principal.application_id)
    return queryset


def events(principal: Principal, request: HttpRequest) -> QuerySet[Event]:
    queryset = Event.objects.using(get_settings().DATABASE)
    return queryset.filter(**_application_filter(request, principal, "application"))


def applications(principal: Principal) -> QuerySet[Application]:
    queryset = Application.objects.using(get_settings().DATABASE)
    if principal.application_id is not None:
        queryset = queryset.filter(pk=principal.application_id)
    return queryset


def get(queryset: QuerySet[Any], what: str, **lookup: Any) -> Any:
    """The one object of ``queryset`` matching ``lookup``, or a 404 naming it."""
    found: Model | None = queryset.filter(**lookup).first()
    if found is None:
        shown = ", ".join(f"{k} {v!r}" for k, v in lookup.items())
        raise ApiError("not_found", f"No {what} with {shown}.")
    return found


def own_application(principal: Principal, uid: Any) -> Application | None:
    """The application a new object belongs to: the key's own, or the one ``uid``
    names (None: global). A scoped key may not name another."""
    if principal.application_id is not None:
        if uid is not None and uid != principal.application_uid:
            raise ApiError("forbidden", "This API key may only act on its own application.")
        return applications(principal).get()
    if uid is None:
        return None
    found = (
        Application.objects.using(get_settings().DATABASE).filter(uid=uid).first()
        if isinstance(uid, str)
        else None
    )
    if found is None:
        raise ApiError(
            "validation_error",
            f"No application with uid {uid!r}.",
            errors={"application": ["No application with this uid."]},
        )
    return found


def parse_time(value: Any, name: str, *, code: str = "invalid_parameter") -> datetime:
    """An ISO 8601 date-time (UTC when it names no offset); ``code`` problem otherwise."""
    parsed = None
    if isinstance(value, str):
        try:
            parsed = parse_datetime(value.strip())
        except ValueError:
            parsed = None
    if parsed is None:
        raise ApiError(
            code,
            f"{name} must be an ISO 8601 date-time such as 2026-01-31T12:00:00Z, got {value!r}.",
        )
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:  # an offset that takes it past year 1 or 9999
        raise ApiError(code, f"{name} is out of range, got {value!r}.") from None
