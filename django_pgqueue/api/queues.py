"""``/queues``: the job queues' flow control (docs/flow-control.md), by name.

A door onto ``django_pgqueue.queues``, which validates and writes: this module
parses the request strictly (unknown fields, wrong types, a bad limit: a 422
naming the field, nothing written) and renders what the queues module reads. A
queue belongs to the whole fleet, not to one application, so every route is the
operator's: it needs the ``queues`` scope, and a key bound to an application is
refused (403) whatever its scopes (``operations.QUEUE_OPERATIONS``, ``fleet``).

``PUT /queues/{name}`` is ``queues.configure``: the body is the whole
configuration (a limit left out is no limit), set at run time, so it wins over
``PGQUEUE["QUEUES"]`` until ``POST /queues/{name}/reset``.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse

from .. import authority, queue_limits, queues
from ..models.flow import Queue
from ..operations import QUEUE_OPERATIONS
from ..queue_limits import LIMIT_FIELDS
from . import audit
from .http import ApiError, Principal, check_fields, invalid_fields, read_json, respond


def render(state: queues.QueueState) -> dict[str, Any]:
    return {
        "name": state.name,
        **state.limits.as_dict(),
        "paused": state.paused,
        "paused_at": state.paused_at,
        "running": state.running,
        "source": state.source or None,
        "overridden_at": state.overridden_at,
    }


def _authorize(principal: Principal, operation: str) -> None:
    authority.authorize(principal, QUEUE_OPERATIONS[operation], None)


def _name(name: str) -> str:
    try:
        return queues.validate_queue_name(name)
    except ValueError as exc:
        raise invalid_fields({"name": [f"{exc}."]}) from None


def _read(name: str) -> queues.QueueState:
    state = queues.get(name)
    if state is None:
        raise ApiError(
            "not_found",
            f"The queue {name!r} has no configuration (no limits, not paused). "
            f"PUT /queues/{name} configures it.",
        )
    return state


def list_queues(request: HttpRequest, principal: Principal) -> HttpResponse:
    _authorize(principal, "view")
    return respond({"data": [render(state) for state in queues.list_queues()]})


def get_queue(request: HttpRequest, principal: Principal, name: str) -> HttpResponse:
    _authorize(principal, "view")
    return respond(render(_read(_name(name))))


def configure_queue(request: HttpRequest, principal: Principal, name: str) -> HttpResponse:
    _authorize(principal, "configure")
    name = _name(name)
    body = read_json(request)
    check_fields(body, LIMIT_FIELDS)
    limits: dict[str, Any] = {}
    errors: dict[str, list[str]] = {}
    for field in LIMIT_FIELDS:
        if field not in body:
            continue
        value = body[field]
        if field.endswith("period") and value is None:
            value = 1  # null: the default period
        if value is not None and type(value) is not int:
            errors[field] = ["Expected an integer or null."]
            continue
        try:
            queue_limits.limits({field: value})  # the rules configure() applies
        except ValueError as exc:
            errors[field] = [f"{exc}."]
            continue
        limits[field] = value
    if errors:
        raise invalid_fields(errors)
    existed = queues.get(name) is not None
    queues.configure(name, **limits)
    state = _read(name)
    audit.record(
        principal,
        Queue,
        {name: f"Configured: {_described(state)}."},
        action_flag=audit.CHANGE if existed else audit.ADDITION,
    )
    return respond(render(state), status=200 if existed else 201)


def _described(state: queues.QueueState) -> str:
    return ", ".join(f"{field}={getattr(state, field)}" for field in LIMIT_FIELDS)


def reset_queue(request: HttpRequest, principal: Principal, name: str) -> HttpResponse:
    _authorize(principal, "reset")
    name = _name(name)
    if not queues.reset(name):
        _read(name)  # the 404
    state = _read(name)
    audit.record(principal, Queue, {name: f"Reset to settings: {_described(state)}."})
    return respond(render(state))


def pause_queue(request: HttpRequest, principal: Principal, name: str) -> HttpResponse:
    _authorize(principal, "pause")
    name = _name(name)
    queues.pause(name)
    audit.record(principal, Queue, {name: "Paused."})
    return respond(render(_read(name)))


def resume_queue(request: HttpRequest, principal: Principal, name: str) -> HttpResponse:
    _authorize(principal, "resume")
    name = _name(name)
    if queues.resume(name):
        audit.record(principal, Queue, {name: "Resumed."})
    return respond(render(_read(name)))
