"""Operator actions on webhook endpoints, shared by the admin, commands and the API."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connections, transaction

from .. import sql
from ..conf import get_settings
from ..notify import wake_workers


def enable_endpoints(ids: Iterable[int], *, using: str | None = None) -> list[int]:
    """Re-enable endpoints: active, breaker closed, counters reset. Returns the ids changed.

    Their deliveries were kept while they were disabled and go out again now.
    """
    alias = using or get_settings().DATABASE
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(sql.ENABLE_ENDPOINTS, [list(ids)])
        changed = [row[0] for row in cursor.fetchall()]
    if changed:
        wake_workers(alias)
    return changed
