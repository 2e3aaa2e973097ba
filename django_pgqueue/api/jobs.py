"""``GET /jobs/{id}``: one job's state, progress and outcome, for the operator.

A door onto the job store's one read (``jobs.store.read``, the read of
``get_result``), which finds a job in the live table or, once it has moved there,
in the history: this module renders what it returns and writes nothing. A job is
the fleet's, of no application (``operations.JOB_READ``, ``fleet``), so the route
needs the ``jobs`` scope on a key bound to no application
(``authority.OPERATOR_SCOPES``); any other key is a 403.
An id no job can have (not ASCII digits, 0, past bigint) is a 404 like an id no
job has.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse

from .. import authority
from ..backend import task_errors
from ..conf import get_settings
from ..jobs import store
from ..jobs.rows import JobRow
from ..models.queue import Status
from ..operations import JOB_READ
from ..stored_json import readable
from .http import ApiError, Principal, respond
from .scoping import object_id


def _error(job: JobRow) -> dict[str, Any] | None:
    """The last attempt's error, for a job that has not succeeded (None if none)."""
    if job.status == Status.SUCCEEDED:
        return None
    errors = task_errors(job.errors)
    if not errors:
        return None
    last = errors[-1]
    return {"exception_class_path": last.exception_class_path, "traceback": last.traceback}


def render(job: JobRow) -> dict[str, Any]:
    """The API's view of one job (the ``Job`` schema of the OpenAPI document)."""
    progress = None
    if job.progress is not None:
        progress = {
            "fraction": job.progress,
            "message": job.progress_message or "",
            "at": job.progress_at,
        }
    return {
        "id": job.id,
        "task": job.task_path,
        "queue": job.queue_name,
        "priority": job.priority,
        "status": job.status,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "progress": progress,
        "created_at": job.created_at,
        "next_attempt_at": job.next_attempt_at,
        "started_at": job.started_at,
        "last_attempted_at": job.last_attempted_at,
        "finished_at": job.finished_at,
        "result": readable(job.result) if job.status == Status.SUCCEEDED else None,
        "error": _error(job),
        "workflow_id": job.workflow_id,
        "step_name": job.step_name,
    }


def get_job(request: HttpRequest, principal: Principal, pk: str) -> HttpResponse:
    authority.authorize(principal, JOB_READ, None)
    job_id = object_id(pk)
    job = store.read(get_settings().DATABASE, job_id)
    if job is None:
        raise ApiError("not_found", f"No job with id {job_id}.")
    return respond(render(job))
