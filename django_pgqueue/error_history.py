"""A job's stored error history (``errors``), read back.

The worker writes a list of objects, one per failed attempt (``exception_class_path``,
``traceback``, ``attempt``, ``at``, ``worker_id``). The column is read back from the
database, where anything may have been written past the worker: every reader (the
task's ``TaskResult.errors``, ``get_result()``, the HTTP API, the admin) goes through
:func:`error_entries`, which never raises. What is not an entry is shown as one that
names the problem, so a bad row costs a line in its own history, not a 500, a task
thread or the job.
"""

from __future__ import annotations

import json
from typing import Any

from .exceptions import StoredJSONNotDecodable
from .stored_json import UndecodableJSON, decode

#: The exception path of an entry standing for what could not be read as one.
NOT_READABLE = "django_pgqueue.exceptions.StoredJSONNotDecodable"


def _unreadable(why: str) -> dict[str, Any]:
    return {"exception_class_path": NOT_READABLE, "traceback": why}


def _shown(value: Any) -> str:
    return json.dumps(value, default=str)[:200]


def error_entries(errors: Any) -> list[dict[str, Any]]:
    """The entries of a stored error history, oldest first; never raises."""
    if isinstance(errors, UndecodableJSON):  # the admin's field, already marked
        return [_unreadable(str(errors))]
    try:
        errors = decode(errors)
    except StoredJSONNotDecodable as exc:
        return [_unreadable(f"the stored error history cannot be decoded: {exc}")]
    if errors is None:
        return []
    if not isinstance(errors, list):
        return [_unreadable(f"the stored error history is not a list: {_shown(errors)}")]
    return [
        entry
        if isinstance(entry, dict)
        else _unreadable(f"error entry {n} is not an object: {_shown(entry)}")
        for n, entry in enumerate(errors)
    ]
