"""The API's HTTP plumbing: authentication, scopes, the rate limit, request bodies,
RFC 9457 problem responses and cursor pagination.

Every view is made by :func:`route`, which answers before the handler runs: 405 for a
method the route has not, 401 without a valid key, 429 over the key's rate limit,
403 without the scope. A handler raises :class:`ApiError` for anything the client
got wrong; the bodies of all such answers are ``application/problem+json``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import RequestDataTooBig, ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import InterfaceError, OperationalError, connections, transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from .. import authority, sql
from ..conf import get_settings
from ..contract import check_json_document, strict_int, strict_text
from ..db import execute_one
from ..docs import docs_site_url
from ..exceptions import PayloadNotJSON, PayloadTooLarge
from .keys import hash_key, split_key, stored_scopes

logger = logging.getLogger("django_pgqueue.api")

PROBLEM_TYPE = "application/problem+json"

#: Titles of the problems the API answers with, by code (docs/http-api.md, "Errors").
PROBLEMS: dict[str, tuple[int, str]] = {
    "invalid_json": (400, "The request body is not valid JSON"),
    "invalid_parameter": (400, "A query parameter is not valid"),
    "unauthorized": (401, "A valid API key is required"),
    "forbidden": (403, "This API key may not do that"),
    "not_found": (404, "Not found"),
    "method_not_allowed": (405, "Method not allowed"),
    "idempotency_conflict": (409, "The idempotency key was used for another request"),
    "conflict": (409, "The request conflicts with the current state"),
    "too_large": (413, "The request body is too large"),
    "unsupported_media_type": (415, "The request body must be application/json"),
    "validation_error": (422, "The request is not valid"),
    "rate_limited": (429, "Too many requests for this API key"),
    "unavailable": (503, "The database is unavailable; retry"),
}


class ApiError(Exception):
    """A problem to answer with (``code`` is a key of ``PROBLEMS``)."""

    def __init__(
        self,
        code: str,
        detail: str,
        *,
        errors: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.errors = errors
        self.headers = dict(headers or {})


def problem(error: ApiError, request: HttpRequest | None = None) -> HttpResponse:
    """The RFC 9457 response for ``error``."""
    status, title = PROBLEMS[error.code]
    body: dict[str, Any] = {
        "type": docs_site_url("http-api", f"problem-{error.code.replace('_', '-')}"),
        "title": title,
        "status": status,
        "detail": error.detail,
        "code": error.code,
    }
    if request is not None:
        body["instance"] = request.path
    if error.errors:
        body["errors"] = error.errors
    response = HttpResponse(json.dumps(body), status=status, content_type=PROBLEM_TYPE)
    for name, value in error.headers.items():
        response[name] = value
    return response


def respond(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> HttpResponse:
    """A JSON response (datetimes as ISO 8601)."""
    response = HttpResponse(
        json.dumps(data, cls=DjangoJSONEncoder), status=status, content_type="application/json"
    )
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def validation_error(exc: ValidationError) -> ApiError:
    """A model's ValidationError as a 422 naming each field."""
    if hasattr(exc, "error_dict"):
        errors = {field: [str(m) for m in msgs] for field, msgs in exc.message_dict.items()}
        detail = "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in errors.items())
        return ApiError("validation_error", detail, errors=errors)
    return ApiError("validation_error", " ".join(exc.messages))


# -- authentication ---------------------------------------------------------------------


@dataclass(frozen=True)
class Principal:
    """The key a request came with: its scopes and, if any, its one application.

    It is the actor of the request (``authority.authorize``): a key bound to an
    application acts for that customer; one bound to none, for the operator.
    """

    key_id: int
    scopes: frozenset[str]
    application_id: int | None
    application_uid: str | None
    application_active: bool = True


def _retry_after(conf: Any, key_id: int) -> float | None:
    """Seconds until key ``key_id`` may send again, read afresh (sql.RATE_RETRY_AFTER)."""
    with connections[conf.DATABASE].cursor() as cursor:
        cursor.execute(
            sql.RATE_RETRY_AFTER,
            {
                "key_id": key_id,
                "window": float(conf.API["RATE_WINDOW"]),
                "default_limit": conf.API["RATE_LIMIT"],
            },
        )
        row = cursor.fetchone()
    return None if row is None or row[0] is None else float(row[0])


def authenticate(request: HttpRequest) -> Principal:
    """The request's key, checked and counted against its rate limit (one statement)."""
    header = request.headers.get("Authorization", "")
    scheme, _, key = header.partition(" ")
    challenge = {"WWW-Authenticate": 'Bearer realm="pgqueue"'}
    if scheme.lower() != "bearer" or not key.strip():
        raise ApiError(
            "unauthorized", "Send the API key as 'Authorization: Bearer <key>'.", headers=challenge
        )
    key = key.strip()
    prefix = split_key(key)
    refused = ApiError(
        "unauthorized", "The API key is not valid or was revoked.", headers=challenge
    )
    if prefix is None:
        raise refused
    conf = get_settings()
    digest = hash_key(key)
    # Prepared once per connection (db.execute_one), as the event's own statement is:
    # parsing and planning it on every request cost more than running it.
    row = execute_one(
        connections[conf.DATABASE],
        sql.AUTHENTICATE,
        {
            "prefix": prefix,
            "key_hash": digest,
            "window": float(conf.API["RATE_WINDOW"]),
            "default_limit": conf.API["RATE_LIMIT"],
        },
        prepare=conf.PREPARED_STATEMENTS,
    )
    if row is None:
        raise refused
    (
        key_id,
        stored_hash,
        scopes,
        application_id,
        application_uid,
        revoked_at,
        application_active,
        allowed,
        wait,
    ) = row
    # The decision is this constant-time comparison, not the lookup by prefix.
    if not hmac.compare_digest(stored_hash, digest) or revoked_at is not None:
        raise refused
    if application_id is not None and not application_active:
        # The portal refuses the same customer (a 404 there: it has no key to name).
        raise refusal(authority.inactive_refusal(application_uid))
    if not allowed:
        wait = _retry_after(conf, key_id) or wait
        retry_after = max(1, math.ceil(wait or 1))
        raise ApiError(
            "rate_limited",
            f"This key is over its rate limit; retry in {retry_after} second(s).",
            headers={"Retry-After": str(retry_after)},
        )
    try:
        granted = stored_scopes(scopes, bound=application_id is not None)
    except ValueError as exc:
        logger.warning("API key %s refused: its stored scopes are not valid: %s", key_id, exc)
        raise ApiError(
            "forbidden",
            f"This API key's scopes in the database are not valid ({exc}); nothing was "
            f"done. Ask an operator for a new key.",
        ) from None
    return Principal(key_id, granted, application_id, application_uid, bool(application_active))


# -- routes -----------------------------------------------------------------------------

Handler = Callable[..., HttpResponse]


@csrf_exempt
def no_such_route(request: HttpRequest, rest: str = "") -> HttpResponse:
    """The last route of the API's URLconf: a problem+json 404 for any other URL under
    it, where Django would answer with its HTML page. A trailing slash is the usual
    slip (the API's URLs have none), so the answer names the URL without it."""
    from django.urls import Resolver404, resolve

    detail = f"There is no API route {request.path}."
    if request.path.endswith("/") and rest:
        try:
            match = resolve(request.path.rstrip("/"))
        except Resolver404:
            match = None
        if match is not None and match.func is not no_such_route:
            detail += (
                f" The API's URLs have no trailing slash: {request.path.rstrip('/')} "
                "(events, not events/)."
            )
    return problem(ApiError("not_found", detail), request)


def route(**methods: tuple[Any, Handler]) -> Callable[..., HttpResponse]:
    """A view serving ``METHOD=(scope, handler)``; the handler gets (request, principal,
    **url kwargs). ``scope`` may be an operation's declaration (``operations.py``): the
    route then needs its scope, and the handler calls ``authority.authorize``."""
    allowed = ", ".join(sorted(methods))

    # Never inside ATOMIC_REQUESTS' transaction: the rate-limit UPSERT would hold its
    # row lock (serialising the key's requests) until the whole request ended, and the
    # views commit before they answer.
    @csrf_exempt
    @transaction.non_atomic_requests
    def view(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        try:
            entry = methods.get(request.method or "")
            if entry is None:
                raise ApiError(
                    "method_not_allowed",
                    f"{request.method} is not allowed here; use {allowed}.",
                    headers={"Allow": allowed},
                )
            _, handler = entry
            check_url_values(request, kwargs)
            principal = authenticate(request)
            authority.check_scope(principal, scopes[request.method or ""])
            return handler(request, principal, **kwargs)
        except ApiError as exc:
            return problem(exc, request)
        except authority.Refused as exc:
            return problem(refusal(exc), request)
        except BadParameter as exc:
            return problem(ApiError("invalid_parameter", f"{exc}."), request)
        except ValidationError as exc:
            return problem(validation_error(exc), request)
        except (OperationalError, InterfaceError):
            # The connection failed (a restart, a failover): whether a write committed
            # is unknown, so the client retries, with its idempotency key.
            logger.warning("HTTP API: database unavailable", exc_info=True)
            return problem(
                ApiError(
                    "unavailable",
                    "The database could not be reached; retry with the same idempotency key.",
                    headers={"Retry-After": "1"},
                ),
                request,
            )

    # A route names its scope, or the operation (operations.py) whose scope it is.
    scopes = {method: getattr(needs, "scope", needs) for method, (needs, _) in methods.items()}
    view.scopes = scopes  # type: ignore[attr-defined]
    view.operations = {  # type: ignore[attr-defined]
        method: needs for method, (needs, _) in methods.items() if not isinstance(needs, str)
    }
    return view


def refusal(exc: authority.Refused) -> ApiError:
    """``authority.Refused`` as the API's answer: 404 for another application's object,
    403 otherwise (naming the field when it is a field's)."""
    if exc.hidden:
        return ApiError("not_found", "Not found.")
    errors = {exc.field: [str(exc)]} if exc.field else None
    return ApiError("forbidden", str(exc), errors=errors)


class BadParameter(ValueError):
    """A path or query value the input contract refuses (answered as a 400)."""


def check_url_values(request: HttpRequest, path_values: Mapping[str, Any]) -> None:
    """Every value of the path and the query string is text PostgreSQL can store
    (``contract.strict_text``), before any handler reads one: a 400 naming it."""
    for name, value in path_values.items():
        if isinstance(value, str):
            strict_text(value, name, error=BadParameter)
    for name, values in request.GET.lists():
        strict_text(name, "a query parameter name", error=BadParameter)
        for value in values:
            strict_text(value, name, error=BadParameter)


def query_int(request: HttpRequest, name: str, *, minimum: int, maximum: int) -> int | None:
    """The query parameter ``name`` as an integer (``contract.strict_int``), or None."""
    raw = request.GET.get(name)
    if raw is None:
        return None
    return strict_int(raw, name, minimum=minimum, maximum=maximum, error=BadParameter)


# -- request bodies ---------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def read_json(request: HttpRequest, *, check_document: bool = True) -> dict[str, Any]:
    """The request's JSON object, within ``PGQUEUE["API"]["MAX_BODY_BYTES"]``.

    With ``check_document`` the whole document also passes the storage contract
    (``contract.check_json_document``: no NUL characters or lone surrogates, nesting
    within ``MAX_JSON_DEPTH``), so nothing a handler stores can fail in PostgreSQL.
    """
    conf = get_settings()
    limit = conf.API["MAX_BODY_BYTES"]
    content_type = request.content_type or ""
    if content_type != "application/json" and not content_type.endswith("+json"):
        raise ApiError(
            "unsupported_media_type",
            f"Send the body as JSON with 'Content-Type: application/json', "
            f"not {content_type or 'no content type'!r}.",
        )
    too_large = ApiError(
        "too_large",
        f"The request body is larger than {limit} bytes (PGQUEUE['API']['MAX_BODY_BYTES']).",
    )
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > limit:
        raise too_large
    try:
        raw = request.body
    except RequestDataTooBig:
        raise too_large from None
    if len(raw) > limit:
        raise too_large
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise ApiError("invalid_json", f"The body is not UTF-8: {exc}.") from None
    except RecursionError:
        raise ApiError("invalid_json", "The body is nested too deeply.") from None
    except ValueError as exc:
        raise ApiError("invalid_json", f"The body is not valid JSON: {exc}.") from None
    if not isinstance(value, dict):
        raise ApiError(
            "invalid_json", f"The body must be a JSON object, got {type(value).__name__}."
        )
    if check_document:
        try:
            check_json_document(
                value,
                name="body",
                max_bytes=limit,
                # The body's own object and its fields' lists and objects come on top
                # of the documents they carry.
                max_depth=conf.MAX_JSON_DEPTH + 2,
                error=PayloadNotJSON,
            )
        except PayloadTooLarge as exc:
            raise ApiError("too_large", str(exc)) from None
        except PayloadNotJSON as exc:
            raise ApiError("validation_error", str(exc)) from None
    return value


def invalid_fields(errors: Mapping[str, list[str]], hint: str = "") -> ApiError:
    """A 422 naming each field at fault with its first message."""
    detail = "; ".join(f"{name}: {messages[0]}" for name, messages in errors.items())
    return ApiError("validation_error", detail + hint, errors=errors)


def check_fields(
    body: Mapping[str, Any], allowed: tuple[str, ...], required: tuple[str, ...] = ()
) -> None:
    """422 for an unknown or missing field, naming it."""
    errors = {name: ["Unknown field."] for name in sorted(set(body) - set(allowed))}
    errors.update({name: ["This field is required."] for name in required if name not in body})
    if errors:
        raise invalid_fields(errors, f" Fields are: {', '.join(allowed)}.")


# -- pagination -------------------------------------------------------------------------


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(f"id:{last_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, _, value = text.partition(":")
        if kind != "id":
            raise ValueError(kind)
        return strict_int(value, "cursor", minimum=1)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ApiError(
            "invalid_parameter", "cursor is not one this API gave out (use next_cursor as is)."
        ) from None


def page_size(request: HttpRequest) -> int:
    conf = get_settings().API
    limit = query_int(request, "limit", minimum=1, maximum=conf["MAX_PAGE_SIZE"])
    return int(conf["PAGE_SIZE"]) if limit is None else limit


def paginate(
    request: HttpRequest,
    queryset: QuerySet[Any],
    render: Callable[[Any], dict[str, Any]],
    *,
    newest_first: bool,
) -> HttpResponse:
    """One page of ``queryset`` by id, and the cursor of the next one.

    Keyset pagination on the primary key: a page starts after the last id of the
    previous one, so rows inserted meanwhile never shift a page (newest first: new
    rows have higher ids than any cursor; oldest first: they come at the end).
    """
    limit = page_size(request)
    cursor = request.GET.get("cursor")
    if cursor:
        after = decode_cursor(cursor)
        queryset = queryset.filter(pk__lt=after) if newest_first else queryset.filter(pk__gt=after)
    rows = list(queryset.order_by("-pk" if newest_first else "pk")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return respond(
        {
            "data": [render(row) for row in rows],
            "next_cursor": encode_cursor(rows[-1].pk) if more else None,
        }
    )
