"""State changes operators make: replay, retry now, cancel, move to the DLQ.

The admin, management commands and the Python API all call these functions, so
each change exists once. Each is one set-based UPDATE guarded by the states it
may change (see :func:`django_pgqueue.sql.operator_update`): rows held by a
worker (``in_progress``) are never touched.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from django.db import connections, models, transaction

from . import sql
from .conf import get_settings
from .models.queue import Status
from .notify import wake_workers

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
}


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


def apply_operation(
    model: type[models.Model], operation: str, ids: Iterable[int]
) -> OperationResult:
    """Apply ``operation`` to the rows of ``model`` with the given ids.

    Returns which rows changed (with the state each left) and which were skipped
    with the reason (their current state, or that they no longer exist).
    """
    try:
        allowed, set_clause = OPERATIONS[operation]
    except KeyError:
        raise ValueError(
            f"Unknown operation {operation!r}; expected one of {', '.join(OPERATIONS)}"
        ) from None
    id_list = sorted({int(i) for i in ids})
    result = OperationResult(operation)
    if not id_list:
        return result
    alias = get_settings().DATABASE
    conn = connections[alias]
    table = conn.ops.quote_name(model._meta.db_table)
    with transaction.atomic(using=alias), conn.cursor() as cursor:
        cursor.execute(sql.operator_update(table, set_clause), [id_list, [str(s) for s in allowed]])
        result.changed = {row[0]: row[1] for row in cursor.fetchall()}
        missing = [i for i in id_list if i not in result.changed]
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
