"""State changes operators make: replay, retry now, cancel, move to the DLQ, abort.

The admin, management commands and the Python API all call these functions, so
each change exists once. Each is one set-based UPDATE guarded by the states it
may change (see :func:`django_pgqueue.sql.operator_update`): rows held by a
worker (``in_progress``) are never touched, except by ``abort``, which only
flags them: the worker holding the row sees the flag and ends the attempt
itself (docs/worker.md, "Aborting a job").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, connections, models, transaction

from . import sql
from .conf import get_settings
from .models.queue import Status
from .notify import wake_workers

if TYPE_CHECKING:
    from .models.webhooks import Delivery, Endpoint

#: The partial unique index of unique tasks (models.queue.Job.Meta).
UNIQUE_LIVE_INDEX = "pgq_job_unique_live"

#: For each operation: the states it may change, and the SET clause it applies.
OPERATIONS: dict[str, tuple[tuple[str, ...], str]] = {
    # Back to the start: attempts reset, due now; errors and results history kept.
    "replay": (
        (Status.SUCCEEDED, Status.DEAD, Status.CANCELLED, Status.FAILED),
        "status = 'pending', attempts = 0, next_attempt_at = now(), "
        "finished_at = NULL, locked_until = NULL",
    ),
    # A scheduled retry runs now instead of waiting out its backoff.
    "retry_now": ((Status.FAILED,), "next_attempt_at = now()"),
    "cancel": (
        (Status.PENDING, Status.FAILED),
        "status = 'cancelled', finished_at = now()",
    ),
    "move_to_dlq": (
        (Status.PENDING, Status.FAILED, Status.CANCELLED),
        "status = 'dead', finished_at = now(), "
        "last_error = 'Moved to the dead-letter queue by an operator'",
    ),
    # Jobs only. A row not running is cancelled at once; a running one is flagged
    # (the lease is left alone) and its worker records the attempt as cancelled.
    # ``old.status`` is the state the row was locked in (see sql.operator_update).
    "abort": (
        (Status.PENDING, Status.FAILED, Status.IN_PROGRESS),
        "abort_requested_at = COALESCE(t.abort_requested_at, now()), "
        "status = CASE WHEN old.status = 'in_progress' THEN old.status ELSE 'cancelled' END, "
        "finished_at = CASE WHEN old.status = 'in_progress' THEN t.finished_at ELSE now() END",
    ),
}

#: Operations that need the ``abort_requested_at`` column (the job table has it).
_ABORT_COLUMN = "abort_requested_at"


@dataclass
class OperationResult:
    """What an operator action did: changed rows with their previous state, and skips."""

    operation: str
    changed: dict[int, str] = field(default_factory=dict)
    skipped: dict[int, str] = field(default_factory=dict)

    @property
    def changed_count(self) -> int:
        return len(self.changed)

    @property
    def skipped_count(self) -> int:
        return len(self.skipped)


def _lookup(operations: dict[str, Any], kind: str, name: str) -> Any:
    try:
        return operations[name]
    except KeyError:
        raise ValueError(
            f"Unknown {kind} {name!r}; expected one of {', '.join(operations)}"
        ) from None


def _start(operation: str, ids: Iterable[int]) -> tuple[list[int], OperationResult, str]:
    """Sorted distinct ids (a stable lock order), an empty result, the database alias."""
    return sorted({int(i) for i in ids}), OperationResult(operation), get_settings().DATABASE


def apply_operation(
    model: type[models.Model], operation: str, ids: Iterable[int]
) -> OperationResult:
    """Apply ``operation`` to the rows of ``model`` with the given ids.

    Returns which rows changed (with the state each left) and which were skipped
    with the reason (their current state, or that they no longer exist).
    """
    allowed, set_clause = _lookup(OPERATIONS, "operation", operation)
    abortable = any(f.name == _ABORT_COLUMN for f in model._meta.concrete_fields)
    if operation == "abort" and not abortable:
        raise ValueError(f"{model._meta.verbose_name_plural} cannot be aborted; only jobs can")
    if operation == "replay" and abortable:
        set_clause += f", {_ABORT_COLUMN} = NULL"  # a replayed job runs afresh
    id_list, result, alias = _start(operation, ids)
    if not id_list:
        return result
    conn = connections[alias]
    table = conn.ops.quote_name(model._meta.db_table)
    statement, states = sql.operator_update(table, set_clause), [str(s) for s in allowed]
    with transaction.atomic(using=alias), conn.cursor() as cursor:
        try:
            with transaction.atomic(using=alias):
                cursor.execute(statement, [id_list, states])
                result.changed = {row[0]: row[1] for row in cursor.fetchall()}
        except IntegrityError as exc:
            # A replayed unique job whose key another live job holds: the unique
            # index refuses it. Replay the rows one by one and skip those.
            if UNIQUE_LIVE_INDEX not in str(exc):
                raise
            for i in id_list:
                try:
                    with transaction.atomic(using=alias):
                        cursor.execute(statement, [[i], states])
                        result.changed.update({row[0]: row[1] for row in cursor.fetchall()})
                except IntegrityError as row_exc:
                    if UNIQUE_LIVE_INDEX not in str(row_exc):
                        raise
                    result.skipped[i] = "its unique key is held by another live job"
        missing = [i for i in id_list if i not in result.changed and i not in result.skipped]
        if missing:
            cursor.execute(f"SELECT id, status FROM {table} WHERE id = ANY(%s)", [missing])  # noqa: S608
            current = dict(cursor.fetchall())
            for i in missing:
                state = current.get(i)
                if state is None:
                    result.skipped[i] = "no longer exists"
                elif state == Status.IN_PROGRESS:
                    result.skipped[i] = "held by a worker (in progress)"
                else:
                    result.skipped[i] = f"is {state}"
        if result.changed and operation in ("replay", "retry_now"):
            wake_workers(alias)
    return result


def replay(model: type[models.Model], ids: Sequence[int]) -> OperationResult:
    """Put terminal or failed rows back to ``pending``, due now, attempts reset."""
    return apply_operation(model, "replay", ids)


def retry_now(model: type[models.Model], ids: Sequence[int]) -> OperationResult:
    """Make rows with a scheduled retry due now."""
    return apply_operation(model, "retry_now", ids)


def cancel(model: type[models.Model], ids: Sequence[int]) -> OperationResult:
    """Cancel rows that have not started (pending or waiting for a retry)."""
    return apply_operation(model, "cancel", ids)


def move_to_dlq(model: type[models.Model], ids: Sequence[int]) -> OperationResult:
    """Move rows that are not running to the dead-letter queue."""
    return apply_operation(model, "move_to_dlq", ids)


def abort(model: type[models.Model], ids: Sequence[int]) -> OperationResult:
    """Abort jobs: cancel those not running, and flag running ones for their worker.

    A flagged attempt is told (``is_aborted()``) and recorded as ``cancelled`` by
    its worker at its next lease extension (within a third of ``LEASE_SECONDS``);
    ``changed`` lists a running job with its state, ``in_progress``, until then.
    """
    return apply_operation(model, "abort", ids)


def abort_job(job: Any) -> OperationResult:
    """``django_pgqueue.abort(result)``: abort one job, given its TaskResult or id."""
    from .models.queue import Job

    return abort(Job, [int(getattr(job, "id", job))])


#: Operator changes to webhook endpoints: for each, which endpoints it applies
#: to (SQL guard) and what it sets. Enabling also closes the circuit, so the
#: endpoint's waiting deliveries go out at once.
ENDPOINT_OPERATIONS: dict[str, tuple[str, str]] = {
    "enable": (
        "NOT is_active OR breaker_state <> 'closed'",
        "is_active = true, disabled_at = NULL, disabled_reason = '', breaker_state = 'closed', "
        "consecutive_failures = 0, failing_since = NULL, open_until = NULL, breaker_cooldown = 0",
    ),
    "disable": (
        "is_active",
        "is_active = false, disabled_at = now(), disabled_reason = 'Disabled by an operator'",
    ),
    "reset_circuit": (
        "breaker_state <> 'closed' OR consecutive_failures > 0 OR failing_since IS NOT NULL",
        "breaker_state = 'closed', consecutive_failures = 0, failing_since = NULL, "
        "open_until = NULL, breaker_cooldown = 0",
    ),
}


def apply_endpoint_operation(operation: str, ids: Iterable[int]) -> OperationResult:
    """Enable, disable or reset the circuit of endpoints, in one guarded UPDATE.

    ``changed`` maps each changed endpoint to the state it left ("disabled,
    circuit open"); endpoints already in the wanted state are ``skipped``.
    """
    from .models.webhooks import Endpoint

    guard, set_clause = _lookup(ENDPOINT_OPERATIONS, "endpoint operation", operation)
    id_list, result, alias = _start(operation, ids)
    if not id_list:
        return result
    conn = connections[alias]
    table = conn.ops.quote_name(Endpoint._meta.db_table)
    with transaction.atomic(using=alias), conn.cursor() as cursor:
        cursor.execute(sql.endpoint_update(table, guard, set_clause), [id_list])
        result.changed = {row[0]: row[1] for row in cursor.fetchall()}
        if operation == "enable" and result.changed:
            # Deliveries kept while it was disabled or failing go out now.
            cursor.execute(sql.DELIVERIES_DUE_NOW, [list(result.changed)])
            wake_workers(alias)
    existing = set(
        Endpoint.objects.using(alias).filter(pk__in=id_list).values_list("pk", flat=True)
    )
    for i in id_list:
        if i not in result.changed:
            result.skipped[i] = "already done" if i in existing else "no longer exists"
    return result


def retry_refused_deliveries(endpoint_id: int) -> int:
    """Make an endpoint's deliveries refused by configuration due now; how many.

    Called when the endpoint is saved: whatever was fixed (its URL, or the settings
    before a restart), waiting minutes for the breaker's pace would only confuse.
    """
    alias = get_settings().DATABASE
    with connections[alias].cursor() as cursor:
        cursor.execute(sql.REFUSED_DELIVERIES_DUE_NOW, [endpoint_id])
        count = cursor.rowcount
    if count:
        wake_workers(alias)
    return count


def replay_endpoint_deliveries(endpoint_id: int, since: datetime) -> OperationResult:
    """Replay one endpoint's failed and dead deliveries created since ``since``.

    The rows are picked here and changed by the guarded ``replay`` UPDATE, so a
    delivery a worker took in between is skipped, not replayed twice.
    """
    from .models.webhooks import Delivery

    ids = Delivery.objects.filter(
        endpoint_id=endpoint_id,
        status__in=[Status.FAILED, Status.DEAD],
        created_at__gte=since,
    ).values_list("pk", flat=True)
    return apply_operation(Delivery, "replay", list(ids))


def send_test_event(endpoint: Endpoint, sent_by: str = "") -> Delivery:
    """Queue one ``pgqueue.test`` event to this endpoint only; returns its Delivery.

    It is tried once (``max_attempts=1``): its outcome is in the delivery's attempt
    log at once instead of after a retry schedule.
    """
    import json

    from django.utils import timezone

    from .models.webhooks import Delivery, Event
    from .webhooks.signing import new_message_id

    alias = get_settings().DATABASE
    payload = {
        "type": "pgqueue.test",
        "endpoint_id": endpoint.pk,
        "sent_by": sent_by,
        "sent_at": timezone.now().isoformat(),
    }
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=True)
    with transaction.atomic(using=alias):
        event = Event.objects.using(alias).create(
            event_type="pgqueue.test",
            payload=payload,
            body=body,
            msg_id=new_message_id(),
            application_id=endpoint.application_id,
        )
        delivery = Delivery.objects.using(alias).create(
            event=event, endpoint=endpoint, max_attempts=1
        )
        wake_workers(alias)
    return delivery
