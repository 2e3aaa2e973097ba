"""``/applications``: the tenants (docs/multi-tenant.md), by their uid.

A key scoped to an application sees and may change only that application, and only
its customer's fields (``authority.OPERATOR_FIELDS``); it can neither create nor
delete applications.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError
from django.http import HttpRequest, HttpResponse

from .. import authority
from ..models.webhooks import Application
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

EDITABLE: dict[str, type] = {"name": str, "metadata": dict, "is_active": bool}


def render(application: Application) -> dict[str, Any]:
    return {
        "uid": application.uid,
        "name": application.name,
        "metadata": application.metadata,
        "is_active": application.is_active,
        "created_at": application.created_at,
        "updated_at": application.updated_at,
    }


def _apply(application: Application, body: dict[str, Any]) -> None:
    errors = {
        name: [f"Expected {kind.__name__.replace('dict', 'an object')}."]
        for name, kind in EDITABLE.items()
        if name in body and type(body[name]) is not kind
    }
    if errors:
        raise invalid_fields(errors)
    for name in EDITABLE:
        if name in body:
            setattr(application, name, body[name])
    application.full_clean(validate_unique=False, validate_constraints=False)


def _unscoped(principal: Principal, action: str) -> None:
    if principal.application_id is not None:
        raise ApiError("forbidden", f"A key scoped to one application cannot {action}.")


def _application(principal: Principal, uid: str) -> Application:
    return scoping.get(scoping.applications(principal), "application", uid=uid)


def list_applications(request: HttpRequest, principal: Principal) -> HttpResponse:
    return paginate(request, scoping.applications(principal), render, newest_first=False)


def create_application(request: HttpRequest, principal: Principal) -> HttpResponse:
    _unscoped(principal, "create applications")
    body = read_json(request)
    check_fields(body, ("uid", *EDITABLE), required=("uid",))
    uid = body["uid"]
    application = Application(uid=uid if isinstance(uid, str) else "")
    if not isinstance(uid, str):
        raise invalid_fields({"uid": ["Expected a string."]})
    _apply(application, body)
    try:
        store.save_application(application)
    except IntegrityError:
        raise ApiError("conflict", f"An application with uid {uid!r} exists already.") from None
    audit.record(principal, Application, {application.pk: "Added."}, action_flag=audit.ADDITION)
    return respond(render(application), status=201)


def get_application(request: HttpRequest, principal: Principal, uid: str) -> HttpResponse:
    return respond(render(_application(principal, uid)))


def update_application(request: HttpRequest, principal: Principal, uid: str) -> HttpResponse:
    application = _application(principal, uid)
    body = read_json(request)
    check_fields(body, tuple(EDITABLE))
    # A customer's key changes its name; is_active and metadata are the operator's.
    authority.check_owned_fields(principal, application, body)
    before = audit.snapshot(application, (name for name in EDITABLE if name in body))
    _apply(application, body)
    store.save_application(application)
    audit.record_change(principal, application, before)
    return respond(render(application))


def delete_application(request: HttpRequest, principal: Principal, uid: str) -> HttpResponse:
    _unscoped(principal, "delete applications")
    audit.delete(
        principal,
        _application(principal, uid),
        "Deleted, with its endpoints, events and keys.",
        store.delete_applications,
    )
    return HttpResponse(status=204)
