"""The ceiling of the ingest benchmark: a bare Django view doing what accepting an
event must do at the least, so that the API's overhead shows as a ratio."""

from __future__ import annotations

import json

from django.db import connections
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from .. import sql
from ..conf import get_settings
from ..db import execute_one
from ..webhooks.signing import new_message_id


@csrf_exempt
def ceiling_event(request: HttpRequest) -> HttpResponse:
    """Parse the JSON body, run the API's own event INSERT (same columns, same unique
    idempotency key) in autocommit, answer 202 with the id.

    No authentication, validation, rate limit, fan-out or stored response: the
    single INSERT and its commit that any implementation pays, in one round trip (a
    single statement needs no ``BEGIN`` and ``COMMIT`` of its own), prepared once per
    connection as the API's own statements are (``db.execute_one``).
    """
    data = json.loads(request.body)
    body = json.dumps(data["payload"], separators=(",", ":"))
    alias = get_settings().DATABASE
    params = [
        data["event_type"],
        body,
        body,
        new_message_id(),
        request.headers.get("Idempotency-Key"),
        None,
        "[]",
        None,
    ]
    event_id, _ = execute_one(
        connections[alias], sql.INSERT_EVENT, params, prepare=get_settings().PREPARED_STATEMENTS
    )
    return JsonResponse({"id": event_id}, status=202)
