"""The OpenAPI 3.1 document of the API, built by hand from the same constants the
views check (field names, limits, scopes), and served at ``openapi.json``.

``tests/api/test_openapi.py`` holds the document to the URLconf: every route is
documented and every documented operation exists.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse

from ..__about__ import __version__
from ..authority import OPERATOR_FIELDS
from ..conf import get_settings
from ..models.api import ApiScope
from ..models.queue import Job, Status
from ..models.webhooks import (
    Application,
    BreakerState,
    Delivery,
    Endpoint,
    Ordering,
    RatePeriod,
)
from ..queue_limits import LIMIT_FIELDS, QUEUE_NAME_MAX_LENGTH
from ..webhooks.routing import MAX_CHANNELS
from .http import respond

INT64_MAX = 2**63 - 1
JSON = "application/json"
PROBLEM = "application/problem+json"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _obj(
    properties: dict[str, Any], required: tuple[str, ...] = (), *, closed: bool = False
) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    if closed:
        schema["additionalProperties"] = False
    return schema


def _page(item: str) -> dict[str, Any]:
    return _obj(
        {
            "data": {"type": "array", "items": _ref(item)},
            "next_cursor": _nullable({"type": "string"}),
        },
        ("data", "next_cursor"),
    )


STRING = {"type": "string"}
DATETIME = {"type": "string", "format": "date-time"}
ID = {"type": "integer", "minimum": 1, "maximum": INT64_MAX}
EVENT_TYPE = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,254}$"}
KEY = {"type": "string", "pattern": "^[!-~]{1,255}$"}
CHANNELS = {
    "type": "array",
    "maxItems": MAX_CHANNELS,
    "items": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$"},
}
SUBSCRIPTIONS = {
    "type": "array",
    "items": STRING,
    "description": "Types or wildcards ('order.*'); empty: all.",
}
HEADERS = {"type": "object", "additionalProperties": STRING}
LIMIT = {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 2**31 - 1}, {"type": "null"}]}
PERIOD = {"type": "integer", "minimum": 1, "maximum": 2**31 - 1, "description": "Seconds."}


def _counted(model: Any, field: str) -> dict[str, Any]:
    """An integer field's schema with the least value the model (and the database's
    CHECK behind it) accepts: declared once, on the field's ``MinValueValidator``."""
    least = [
        v.limit_value for v in model._meta.get_field(field).validators if v.code == "min_value"
    ]
    return {"type": "integer", **({"minimum": least[0]} if least else {})}


def _mark_operator_fields(model: Any, fields: dict[str, Any]) -> None:
    """Say on each operator's field (``authority.OPERATOR_FIELDS``) who may change it."""
    for name in OPERATOR_FIELDS[model]:
        fields[name] = {
            **fields[name],
            "description": "Set by the operator: a key bound to an application may not "
            "change it (403).",
        }


def _schemas() -> dict[str, Any]:
    endpoint_fields = {
        "url": {"type": "string", "format": "uri", "maxLength": 2048},
        "description": STRING,
        "event_types": SUBSCRIPTIONS,
        "channels": CHANNELS,
        "headers": {
            **HEADERS,
            "description": "Extra HTTP headers sent with every delivery (write-only).",
        },
        "max_in_flight": LIMIT,
        "rate_limit": LIMIT,
        "rate_period": {"type": "integer", "enum": [p.value for p in RatePeriod]},
        "ordering": {"type": "string", "enum": [o.value for o in Ordering]},
        "relay": {
            "type": "boolean",
            "description": "Relay mode (broker destinations only): batches in event order.",
        },
    }
    endpoint = _obj(
        {
            "id": ID,
            "url": STRING,
            "application": _nullable(STRING),
            "description": STRING,
            "event_types": {"type": "array", "items": STRING},
            "channels": {"type": "array", "items": STRING},
            "header_names": {"type": "array", "items": STRING},
            "is_active": {"type": "boolean"},
            "disabled_at": _nullable(DATETIME),
            "disabled_reason": STRING,
            "breaker_state": {"type": "string", "enum": [b.value for b in BreakerState]},
            "max_in_flight": _nullable({"type": "integer"}),
            "rate_limit": _nullable({"type": "integer"}),
            "rate_period": {"type": "integer"},
            "ordering": STRING,
            "relay": {"type": "boolean"},
            "created_at": DATETIME,
            "updated_at": DATETIME,
        },
        ("id", "url", "application", "is_active", "event_types", "channels", "created_at"),
    )
    delivery_props = {
        "id": ID,
        "event_id": ID,
        "webhook_id": STRING,
        "event_type": STRING,
        "endpoint_id": ID,
        "application": _nullable(STRING),
        "status": {"type": "string", "enum": [s.value for s in Status]},
        "attempts": _counted(Delivery, "attempts"),
        "max_attempts": _counted(Delivery, "max_attempts"),
        "next_attempt_at": _nullable(DATETIME),
        "last_error": STRING,
        "created_at": DATETIME,
        "updated_at": DATETIME,
        "finished_at": _nullable(DATETIME),
    }
    attempt = _obj(
        {
            "attempt": {"type": "integer"},
            "started_at": DATETIME,
            "duration_ms": {"type": "integer"},
            "status_code": _nullable({"type": "integer"}),
            "request_headers": {
                "type": "object",
                "additionalProperties": STRING,
                "description": "The headers the attempt sent (HTTP request or broker "
                'message); values of credential headers are "[redacted]".',
            },
            "response_headers": {"type": "object"},
            "response_body": STRING,
            "response_truncated": {"type": "boolean"},
            "error": STRING,
        },
        ("attempt", "started_at", "status_code", "error"),
    )
    operation_result = _obj(
        {
            "changed": {"type": "array", "items": ID},
            "skipped": {"type": "object", "additionalProperties": STRING},
        },
        ("changed", "skipped"),
    )
    application_fields = {
        "name": {"type": "string", "maxLength": 255},
        "metadata": {"type": "object"},
        "is_active": {"type": "boolean"},
    }
    _mark_operator_fields(Endpoint, endpoint_fields)
    _mark_operator_fields(Application, application_fields)
    most = get_settings().API["MAX_BATCH"]
    return {
        "Problem": _obj(
            {
                "type": STRING,
                "title": STRING,
                "status": {"type": "integer"},
                "detail": STRING,
                "code": STRING,
                "instance": STRING,
                "errors": {
                    "type": "object",
                    "additionalProperties": {"type": "array", "items": STRING},
                },
            },
            ("type", "title", "status", "detail"),
        ),
        "EventIn": _obj(
            {
                "event_type": EVENT_TYPE,
                "payload": {"type": "object"},
                "application": _nullable(KEY),
                "channels": _nullable(CHANNELS),
                "idempotency_key": _nullable(KEY),
                "ordering_key": _nullable(KEY),
            },
            ("event_type", "payload"),
            closed=True,
        ),
        "Event": _obj(
            {
                "id": ID,
                "webhook_id": STRING,
                "event_type": STRING,
                "application": _nullable(STRING),
                "channels": {"type": "array", "items": STRING},
                "idempotency_key": _nullable(STRING),
                "ordering_key": _nullable(STRING),
                "created_at": DATETIME,
                "deliveries": {"type": "integer", "minimum": 0},
            },
            ("id", "webhook_id", "event_type", "deliveries", "created_at"),
        ),
        "EventBatchIn": _obj(
            {
                "events": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": most,
                    "items": _ref("EventIn"),
                }
            },
            ("events",),
            closed=True,
        ),
        "EventBatch": _obj({"events": {"type": "array", "items": _ref("Event")}}, ("events",)),
        "Endpoint": endpoint,
        "EndpointPage": _page("Endpoint"),
        "EndpointCreated": {"allOf": [endpoint, _obj({"secret": STRING}, ("secret",))]},
        "EndpointIn": _obj(
            {
                **endpoint_fields,
                "application": _nullable(KEY),
                "secret": {"type": "string", "pattern": "^whsec_"},
            },
            ("url",),
            closed=True,
        ),
        "EndpointPatch": _obj(endpoint_fields, closed=True),
        "Secret": _obj({"secret": STRING}, ("secret",)),
        "ReplaySinceIn": _obj({"since": DATETIME}, ("since",), closed=True),
        "OperationResult": operation_result,
        "TestEvent": _obj(
            {"delivery_id": ID, "event_id": ID, "webhook_id": STRING},
            ("delivery_id", "event_id", "webhook_id"),
        ),
        "Delivery": _obj(delivery_props, ("id", "event_id", "endpoint_id", "status", "created_at")),
        "DeliveryPage": _page("Delivery"),
        "DeliveryDetail": _obj(
            {
                **delivery_props,
                "payload": {"type": "object"},
                "attempts_log": {"type": "array", "items": attempt},
            },
            ("id", "event_id", "endpoint_id", "status", "attempts_log"),
        ),
        "BulkReplayIn": _obj(
            {"ids": {"type": "array", "minItems": 1, "maxItems": most, "items": ID}},
            ("ids",),
            closed=True,
        ),
        "EventType": _obj(
            {
                "name": STRING,
                "description": STRING,
                "schema": _nullable({"type": "object"}),
                "declared": {"type": "boolean"},
                "seen": {"type": "boolean"},
            },
            ("name", "declared", "seen"),
        ),
        "EventTypeList": _obj({"data": {"type": "array", "items": _ref("EventType")}}, ("data",)),
        "Application": _obj(
            {"uid": STRING, **application_fields, "created_at": DATETIME, "updated_at": DATETIME},
            ("uid", "name", "is_active", "created_at"),
        ),
        "ApplicationPage": _page("Application"),
        "Queue": _obj(
            {
                "name": STRING,
                **{field: LIMIT for field in LIMIT_FIELDS if not field.endswith("period")},
                **{field: PERIOD for field in LIMIT_FIELDS if field.endswith("period")},
                "paused": {"type": "boolean"},
                "paused_at": _nullable(DATETIME),
                "running": {"type": "integer", "minimum": 0},
                "source": {
                    "anyOf": [
                        {"type": "string", "enum": ["run time", "settings"]},
                        {"type": "null"},
                    ],
                    "description": "Where the limits come from: 'run time' wins over the "
                    "settings until reset; null: neither (a row a pause made).",
                },
                "overridden_at": _nullable(DATETIME),
            },
            ("name", *LIMIT_FIELDS, "paused", "running", "source"),
        ),
        "QueueList": _obj({"data": {"type": "array", "items": _ref("Queue")}}, ("data",)),
        "QueueIn": _obj(
            {
                **{field: LIMIT for field in LIMIT_FIELDS if not field.endswith("period")},
                **{field: _nullable(PERIOD) for field in LIMIT_FIELDS if field.endswith("period")},
            },
            closed=True,
        ),
        "Job": _job_schema(),
        "ApplicationIn": _obj({"uid": KEY, **application_fields}, ("uid",), closed=True),
        "ApplicationPatch": _obj(application_fields, closed=True),
    }


def _job_schema() -> dict[str, Any]:
    """``GET /jobs/{id}`` (``api/jobs.render``)."""
    when = {
        name: _nullable(DATETIME) for name in ("started_at", "last_attempted_at", "finished_at")
    }
    progress = _obj(
        {
            "fraction": {"type": "number", "minimum": 0, "maximum": 1},
            "message": STRING,
            "at": _nullable(DATETIME),
        },
        ("fraction", "message", "at"),
    )
    error = _obj(
        {"exception_class_path": STRING, "traceback": STRING},
        ("exception_class_path", "traceback"),
    )
    return _obj(
        {
            "id": ID,
            "task": STRING,
            "queue": STRING,
            "priority": {"type": "integer"},
            "status": {"type": "string", "enum": [s.value for s in Status]},
            "attempts": _counted(Job, "attempts"),
            "max_attempts": _counted(Job, "max_attempts"),
            "progress": {
                **_nullable(progress),
                "description": "The last report of the running task (context.set_progress).",
            },
            "created_at": DATETIME,
            "next_attempt_at": DATETIME,
            **when,
            "result": {"description": "The return value, once succeeded (else null)."},
            "error": {
                **_nullable(error),
                "description": "The last attempt's error, unless succeeded (else null).",
            },
            "workflow_id": _nullable(ID),
            "step_name": _nullable(STRING),
        },
        ("id", "task", "queue", "status", "attempts", "max_attempts", "progress", "result"),
    )


#: Problems every authenticated operation may answer with.
_COMMON = {
    "401": "No valid API key.",
    "403": "The key lacks the scope, names another application, belongs to an inactive "
    "application, or changes an operator's field.",
    "429": "Over the key's rate limit (see Retry-After).",
    "503": "The database is unavailable; retry (with the same idempotency key).",
}


def _problems(*codes: str) -> dict[str, Any]:
    descriptions = {
        "400": "Malformed JSON, or a malformed query or path value (NUL, non-ASCII digits).",
        "404": "No such object (or not this key's application).",
        "409": "Conflict (an idempotency key used for another request, or the object's state).",
        "413": "The body is too large.",
        "415": "The body is not application/json.",
        "422": "The request is not valid; `errors` names the fields.",
        **_COMMON,
    }
    wanted = sorted({*codes, *_COMMON})
    responses: dict[str, Any] = {}
    for code in wanted:
        response: dict[str, Any] = {
            "description": descriptions[code],
            "content": {PROBLEM: {"schema": _ref("Problem")}},
        }
        if code in ("429", "503"):
            response["headers"] = {"Retry-After": {"schema": {"type": "integer"}}}
        responses[code] = response
    return responses


_BODY_PROBLEMS = ("400", "413", "415", "422")


def _op(
    op_id: str,
    summary: str,
    scope: str,
    ok: tuple[str, str | None],
    *,
    body: str | None = None,
    params: list[dict[str, Any]] | None = None,
    problems: tuple[str, ...] = (),
) -> dict[str, Any]:
    status, schema = ok
    success: dict[str, Any] = {"description": "Done."}
    if schema is not None:
        success["content"] = {JSON: {"schema": _ref(schema)}}
    operation: dict[str, Any] = {
        "operationId": op_id,
        "summary": summary,
        "description": f"Scope: `{scope}`.",
        "tags": [op_id.split("_", 1)[0]],
        "responses": {status: success, **_problems(*problems, *(_BODY_PROBLEMS if body else ()))},
    }
    if body is not None:
        operation["requestBody"] = {"required": True, "content": {JSON: {"schema": _ref(body)}}}
    if params:
        operation["parameters"] = params
    return operation


def _created_or_changed(operation: dict[str, Any]) -> dict[str, Any]:
    """A PUT's answers: 200 with the object changed, 201 with it made."""
    changed = operation["responses"]["200"]
    operation["responses"]["201"] = {**changed, "description": "Done; the row was made."}
    return operation


def _path_id(name: str = "id") -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": ID}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


def _paging() -> list[dict[str, Any]]:
    most = get_settings().API["MAX_PAGE_SIZE"]
    return [
        _query("cursor", STRING, "next_cursor of the previous page."),
        _query("limit", {"type": "integer", "minimum": 1, "maximum": most}, "Items per page."),
    ]


APPLICATION_FILTER = _query("application", KEY, "Only this application's objects (its uid).")


def build_document(base: str = "") -> dict[str, Any]:
    """The OpenAPI 3.1 document; ``base`` is the mount point's path (the server URL)."""
    name_param = {
        "name": "name",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "minLength": 1, "maxLength": QUEUE_NAME_MAX_LENGTH},
    }
    uid_param = {
        "name": "uid",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": "^[!-~]{1,255}$"},
    }
    idem_header = {
        "name": "Idempotency-Key",
        "in": "header",
        "required": False,
        "schema": KEY,
        "description": "The same as the idempotency_key field.",
    }
    ep = [_path_id()]
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "django_pgqueue webhook API",
            "version": __version__,
            "description": (
                "Send events (stored, then 202) and manage webhook endpoints, deliveries and "
                "applications. Errors are RFC 9457 application/problem+json."
            ),
        },
        "servers": [{"url": base or "/"}],
        "security": [{"bearerAuth": []}],
        "paths": {
            "/events": {
                "post": _op(
                    "events_create",
                    "Send an event: stored with its deliveries, then 202.",
                    "send",
                    ("202", "Event"),
                    body="EventIn",
                    params=[idem_header],
                    problems=("409",),
                )
            },
            "/events/batch": {
                "post": _op(
                    "events_batch",
                    "Send several events, all or nothing.",
                    "send",
                    ("202", "EventBatch"),
                    body="EventBatchIn",
                    problems=("409",),
                )
            },
            "/endpoints": {
                "get": _op(
                    "endpoints_list",
                    "List endpoints.",
                    "read",
                    ("200", "EndpointPage"),
                    params=[APPLICATION_FILTER, *_paging()],
                    problems=("400",),
                ),
                "post": _op(
                    "endpoints_create",
                    "Create an endpoint; its secret is in this answer only.",
                    "manage",
                    ("201", "EndpointCreated"),
                    body="EndpointIn",
                ),
            },
            "/endpoints/{id}": {
                "get": _op(
                    "endpoints_get",
                    "An endpoint.",
                    "read",
                    ("200", "Endpoint"),
                    params=ep,
                    problems=("404",),
                ),
                "patch": _op(
                    "endpoints_update",
                    "Change an endpoint.",
                    "manage",
                    ("200", "Endpoint"),
                    body="EndpointPatch",
                    params=ep,
                    problems=("404",),
                ),
                "delete": _op(
                    "endpoints_delete",
                    "Delete an endpoint and its deliveries.",
                    "manage",
                    ("204", None),
                    params=ep,
                    problems=("404",),
                ),
            },
            "/endpoints/{id}/rotate-secret": {
                "post": _op(
                    "endpoints_rotate_secret",
                    "A new signing secret (shown once); the old one signs during the grace period.",
                    "secrets",
                    ("200", "Secret"),
                    params=ep,
                    problems=("404",),
                )
            },
            "/endpoints/{id}/enable": {
                "post": _op(
                    "endpoints_enable",
                    "Enable an endpoint and close its circuit.",
                    "manage",
                    ("200", "Endpoint"),
                    params=ep,
                    problems=("404",),
                )
            },
            "/endpoints/{id}/disable": {
                "post": _op(
                    "endpoints_disable",
                    "Disable an endpoint (its deliveries wait).",
                    "manage",
                    ("200", "Endpoint"),
                    params=ep,
                    problems=("404",),
                )
            },
            "/endpoints/{id}/test": {
                "post": _op(
                    "endpoints_test",
                    "Send a pgqueue.test event to this endpoint only.",
                    "manage",
                    ("202", "TestEvent"),
                    params=ep,
                    problems=("404",),
                )
            },
            "/endpoints/{id}/replay": {
                "post": _op(
                    "endpoints_replay",
                    "Replay the endpoint's failed and dead deliveries created since a time.",
                    "manage",
                    ("200", "OperationResult"),
                    body="ReplaySinceIn",
                    params=ep,
                    problems=("404",),
                )
            },
            "/deliveries": {
                "get": _op(
                    "deliveries_list",
                    "List deliveries, newest first.",
                    "read",
                    ("200", "DeliveryPage"),
                    params=[
                        _query(
                            "status",
                            {"type": "string", "enum": [s.value for s in Status]},
                            "Only this status.",
                        ),
                        _query("endpoint", ID, "Only this endpoint's."),
                        _query("event_type", EVENT_TYPE, "Only events of this type."),
                        _query("since", DATETIME, "Created at or after."),
                        _query("until", DATETIME, "Created before."),
                        APPLICATION_FILTER,
                        *_paging(),
                    ],
                    problems=("400",),
                )
            },
            "/deliveries/replay": {
                "post": _op(
                    "deliveries_replay_many",
                    "Replay deliveries by id.",
                    "manage",
                    ("200", "OperationResult"),
                    body="BulkReplayIn",
                )
            },
            "/deliveries/{id}": {
                "get": _op(
                    "deliveries_get",
                    "A delivery with its payload and attempts.",
                    "read",
                    ("200", "DeliveryDetail"),
                    params=ep,
                    problems=("404",),
                )
            },
            "/deliveries/{id}/replay": {
                "post": _op(
                    "deliveries_replay",
                    "Replay one delivery.",
                    "manage",
                    ("200", "OperationResult"),
                    params=ep,
                    problems=("404",),
                )
            },
            "/event-types": {
                "get": _op(
                    "eventtypes_list",
                    "Event types declared in the catalogue and seen in recent events.",
                    "read",
                    ("200", "EventTypeList"),
                    params=[APPLICATION_FILTER],
                )
            },
            "/applications": {
                "get": _op(
                    "applications_list",
                    "List applications.",
                    "read",
                    ("200", "ApplicationPage"),
                    params=_paging(),
                    problems=("400",),
                ),
                "post": _op(
                    "applications_create",
                    "Create an application.",
                    "manage",
                    ("201", "Application"),
                    body="ApplicationIn",
                    problems=("409",),
                ),
            },
            "/applications/{uid}": {
                "get": _op(
                    "applications_get",
                    "An application.",
                    "read",
                    ("200", "Application"),
                    params=[uid_param],
                    problems=("404",),
                ),
                "patch": _op(
                    "applications_update",
                    "Change an application.",
                    "manage",
                    ("200", "Application"),
                    body="ApplicationPatch",
                    params=[uid_param],
                    problems=("404",),
                ),
                "delete": _op(
                    "applications_delete",
                    "Delete an application with its endpoints, events and keys.",
                    "manage",
                    ("204", None),
                    params=[uid_param],
                    problems=("404",),
                ),
            },
            "/queues": {
                "get": _op(
                    "queues_list",
                    "The configured job queues: limits, pause, running jobs, source.",
                    "queues",
                    ("200", "QueueList"),
                ),
            },
            "/queues/{name}": {
                "get": _op(
                    "queues_get",
                    "A job queue's flow control.",
                    "queues",
                    ("200", "Queue"),
                    params=[name_param],
                    problems=("404", "422"),
                ),
                "put": _created_or_changed(
                    _op(
                        "queues_configure",
                        "Set every limit of a queue at run time (a limit left out is no "
                        "limit); it wins over PGQUEUE['QUEUES'] until reset.",
                        "queues",
                        ("200", "Queue"),
                        body="QueueIn",
                        params=[name_param],
                    )
                ),
            },
            **{
                f"/queues/{{name}}/{action}": {
                    "post": _op(
                        f"queues_{action}",
                        summary,
                        "queues",
                        ("200", "Queue"),
                        params=[name_param],
                        problems=("404", "422"),
                    )
                }
                for action, summary in (
                    ("reset", "Hand a queue's limits back to PGQUEUE['QUEUES']."),
                    ("pause", "Pause a queue: no new start from the workers' next claim."),
                    ("resume", "Resume a paused queue."),
                )
            },
            "/jobs/{id}": {
                "get": _op(
                    "jobs_get",
                    "A job, live or in the history: state, attempts, progress, result or "
                    "error. For keys bound to no application.",
                    "jobs",
                    ("200", "Job"),
                    params=ep,
                    problems=("404",),
                )
            },
        },
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": (
                        "pgq_<prefix>_<secret>. A key holds one or more scopes ("
                        + ", ".join(scope.value for scope in ApiScope)
                        + "); each operation's description names the one it needs."
                    ),
                }
            },
        },
    }


def openapi_view(request: HttpRequest) -> HttpResponse:
    """``GET openapi.json``: public, like the documentation it is. Its server URL is
    where the API is mounted, so tools call the right paths."""
    return respond(build_document(request.path.rsplit("/", 1)[0]))
