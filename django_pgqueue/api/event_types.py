"""``GET /event-types``: the types the project declares (the catalogue,
``PGQUEUE["WEBHOOKS"]["EVENT_TYPES"]``) and those seen in recent events."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from ..webhooks.catalogue import catalogue
from . import scoping
from .http import Principal, respond

#: How many of the newest events the "seen" types are read from: the event table
#: has no index on the type, and a scan of all of it would grow with its history.
RECENT_EVENTS = 10_000


def list_event_types(request: HttpRequest, principal: Principal) -> HttpResponse:
    recent = scoping.events(principal, request).order_by("-pk").values_list("event_type", flat=True)
    seen = set(recent[:RECENT_EVENTS])
    declared = catalogue()
    data = []
    for name in sorted(seen | set(declared)):
        entry = declared.get(name)
        data.append(
            {
                "name": name,
                "description": entry.description if entry else "",
                "schema": dict(entry.schema) if entry and entry.schema else None,
                "declared": entry is not None,
                "seen": name in seen,
            }
        )
    return respond({"data": data})
