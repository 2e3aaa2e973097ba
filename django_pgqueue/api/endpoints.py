"""``/endpoints``: list, create, read, change, delete; rotate the secret, enable,
disable, send a test event, replay since a time.

Every change goes through what the admin and the portal use: the model's
``full_clean`` (the SSRF check of the URL, headers, subscriptions), then the webhook
store (``save_endpoint``, which writes the configuration only, ``delete_endpoints``)
and the operations of ``operations.py`` (``rotate_secret`` among them).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse

from .. import authority, operations
from ..conf import get_settings
from ..models.webhooks import Delivery, Endpoint, Ordering, RatePeriod
from ..operations import DELIVERY_OPERATIONS, ENDPOINT_OPERATIONS
from ..webhooks import store
from . import audit, scoping
from .http import (
    ApiError,
    Principal,
    check_fields,
    invalid_fields,
    paginate,
    read_json,
    respond,
)

#: Fields a client may set on create and change, with the JSON type each takes.
EDITABLE: dict[str, tuple[type | tuple[type, ...], bool]] = {
    # name: (types, nullable)
    "url": (str, False),
    "description": (str, False),
    "event_types": (list, False),
    "channels": (list, False),
    "headers": (dict, False),
    "max_in_flight": (int, True),
    "rate_limit": (int, True),
    "rate_period": (int, False),
    "ordering": (str, False),
    "relay": (bool, False),
}
CREATE_ONLY = ("application", "secret")


def render(endpoint: Endpoint) -> dict[str, Any]:
    """An endpoint as the API shows it: never its secret, and only the names of its
    headers (their values may be credentials of the receiver)."""
    return {
        "id": endpoint.pk,
        # A broker URL's password is shown masked; sent back as is, it is kept.
        "url": endpoint.display_url,
        "application": endpoint.application.uid if endpoint.application else None,
        "description": endpoint.description,
        "event_types": endpoint.event_types,
        "channels": endpoint.channels,
        # Names only; a row whose headers SQL wrote as no object shows none.
        "header_names": (
            sorted(str(name) for name in endpoint.headers)
            if isinstance(endpoint.headers, dict)
            else []
        ),
        "is_active": endpoint.is_active,
        "disabled_at": endpoint.disabled_at,
        "disabled_reason": endpoint.disabled_reason,
        "breaker_state": endpoint.breaker_state,
        "max_in_flight": endpoint.max_in_flight,
        "rate_limit": endpoint.rate_limit,
        "rate_period": endpoint.rate_period,
        "ordering": endpoint.ordering,
        "relay": endpoint.relay,
        "created_at": endpoint.created_at,
        "updated_at": endpoint.updated_at,
    }


def _apply(endpoint: Endpoint, body: dict[str, Any]) -> None:
    """Set the editable fields given in ``body``, each checked for its JSON type, then
    the model's own validation (422 naming each field)."""
    errors: dict[str, list[str]] = {}
    for name, (types, nullable) in EDITABLE.items():
        if name not in body:
            continue
        value = body[name]
        if (value is None and not nullable) or (
            value is not None
            # JSON true/false are bool, which is also an int: only a bool field takes one.
            and (isinstance(value, bool) != (types is bool) or not isinstance(value, types))
        ):
            errors[name] = [f"Expected {_type_name(types)}{' or null' if nullable else ''}."]
            continue
        if isinstance(value, dict) and not all(isinstance(v, str) for v in value.values()):
            errors[name] = ["Header values must be strings."]
            continue
        setattr(endpoint, name, value)
    if "rate_period" in body and body["rate_period"] not in RatePeriod.values:
        errors["rate_period"] = [f"One of {', '.join(map(str, RatePeriod.values))}."]
    if "ordering" in body and body["ordering"] not in Ordering.values:
        errors["ordering"] = [f"One of {', '.join(Ordering.values)}."]
    if errors:
        raise invalid_fields(errors)
    endpoint.full_clean(exclude=["secret_ciphertext", "previous_secrets"])


def _type_name(types: type | tuple[type, ...]) -> str:
    names = {
        str: "a string",
        int: "an integer",
        list: "a list",
        dict: "an object",
        bool: "true or false",
    }
    return " or ".join(names[t] for t in (types if isinstance(types, tuple) else (types,)))


def _endpoint(principal: Principal, pk: str, operation: str | None = None) -> Endpoint:
    """The key's endpoint ``pk`` (404 for another application's), and, with an
    ``operation``, the key's authority to apply it there."""
    endpoint = scoping.get(scoping.endpoints(principal), "endpoint", pk=scoping.object_id(pk))
    if operation is not None:
        authority.authorize(principal, ENDPOINT_OPERATIONS[operation], endpoint.application_id)
    return endpoint


def list_endpoints(request: HttpRequest, principal: Principal) -> HttpResponse:
    return paginate(request, scoping.endpoints(principal, request), render, newest_first=False)


def create_endpoint(request: HttpRequest, principal: Principal) -> HttpResponse:
    body = read_json(request)
    check_fields(body, (*EDITABLE, *CREATE_ONLY), required=("url",))
    endpoint = Endpoint(application=scoping.own_application(principal, body.get("application")))
    authority.check_owned_fields(principal, endpoint, body)
    secret = body.get("secret")
    if secret is not None:
        try:
            if not isinstance(secret, str):
                raise ValueError("the secret must be a string such as whsec_...")
            endpoint.secret = secret
        except ValueError as exc:
            raise ApiError(
                "validation_error", f"secret: {exc}", errors={"secret": [str(exc)]}
            ) from None
    _apply(endpoint, body)
    store.save_endpoint(endpoint)
    audit.record(principal, Endpoint, {endpoint.pk: "Added."}, action_flag=audit.ADDITION)
    # The one answer that carries the secret; GET never does.
    return respond({**render(endpoint), "secret": endpoint.secret}, status=201)


def get_endpoint(request: HttpRequest, principal: Principal, pk: str) -> HttpResponse:
    return respond(render(_endpoint(principal, pk)))


def update_endpoint(request: HttpRequest, principal: Principal, pk: str) -> HttpResponse:
    endpoint = _endpoint(principal, pk)
    body = read_json(request)
    check_fields(body, tuple(EDITABLE))
    authority.check_owned_fields(principal, endpoint, body)
    before = audit.snapshot(endpoint, (name for name in EDITABLE if name in body))
    _apply(endpoint, body)
    store.save_endpoint(endpoint)
    audit.record_change(principal, endpoint, before)
    return respond(render(endpoint))


def delete_endpoint(request: HttpRequest, principal: Principal, pk: str) -> HttpResponse:
    audit.delete(
        principal, _endpoint(principal, pk), "Deleted, with its deliveries.", store.delete_endpoints
    )
    return HttpResponse(status=204)


def rotate_secret(request: HttpRequest, principal: Principal, pk: str) -> HttpResponse:
    endpoint = _endpoint(principal, pk, "rotate_secret")
    secret = operations.rotate_secret(endpoint)
    grace = get_settings().WEBHOOKS["SECRET_ROTATION_GRACE"]
    audit.record(principal, Endpoint, {endpoint.pk: audit.rotated(grace)})
    return respond({"secret": secret})


def _operation(operation: str) -> Any:
    def view(request: HttpRequest, principal: Principal, pk: str) -> HttpResponse:
        endpoint = _endpoint(principal, pk)
        result = operations.apply_endpoint_operation(operation, [endpoint.pk], actor=principal)
        op = ENDPOINT_OPERATIONS[operation]
        audit.record(
            principal, Endpoint, {done: op.audit(was) for done, was in result.changed.items()}
        )
        return respond(render(_endpoint(principal, pk)))

    return view


enable_endpoint = _operation("enable")
disable_endpoint = _operation("disable")


def send_test(request: HttpRequest, principal: Principal, pk: str) -> HttpResponse:
    endpoint = _endpoint(principal, pk, "send_test_event")
    delivery = operations.send_test_event(endpoint)
    if delivery is None:
        raise ApiError(
            "conflict",
            f"Endpoint {endpoint.pk} is disabled: enable it to send a test event; nothing "
            f"was queued.",
        )
    audit.record(principal, Endpoint, {endpoint.pk: audit.test_event_sent(delivery.pk)})
    return respond(
        {
            "delivery_id": delivery.pk,
            "event_id": delivery.event_id,
            "webhook_id": delivery.event.msg_id,
        },
        status=202,
    )


def record_replays(
    principal: Principal, result: operations.OperationResult, note: str = ""
) -> operations.OperationResult:
    """Put each replayed delivery on record (``note`` says how it was chosen)."""
    replay = DELIVERY_OPERATIONS["replay"]
    audit.record(
        principal,
        Delivery,
        {pk: f"{replay.audit(old)}{note}" for pk, old in result.changed.items()},
    )
    return result


def operation_result(result: operations.OperationResult) -> dict[str, Any]:
    return {
        "changed": sorted(result.changed),
        "skipped": {str(pk): reason for pk, reason in sorted(result.skipped.items())},
    }


def replay_since(request: HttpRequest, principal: Principal, pk: str) -> HttpResponse:
    endpoint = _endpoint(principal, pk)
    body = read_json(request)
    check_fields(body, ("since",), required=("since",))
    since = scoping.parse_time(body["since"], "since", code="validation_error")
    # Authorised as the endpoint's operation; its deliveries are then the endpoint's own.
    authority.authorize(principal, ENDPOINT_OPERATIONS["replay_failed"], endpoint.application_id)
    result = operations.replay_endpoint_deliveries(endpoint.pk, since, actor=principal)
    when = f"{since:%Y-%m-%d %H:%M}"
    record_replays(principal, result, f" (endpoint replay since {when})")
    if result.changed:
        audit.record(
            principal,
            Endpoint,
            {
                endpoint.pk: f"Replayed {result.changed_count} failed/dead deliveries "
                f"created since {when}"
            },
        )
    return respond(operation_result(result))
