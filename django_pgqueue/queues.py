"""Flow control of job queues: the one writer of ``pgqueue_queue`` rows.

A queue is a name on its jobs (``queue_name``) and needs no row: a queue without
one has no limits and is never paused. :func:`configure` and :func:`pause` make
the row on first use; enqueue never does (it is the hot path). Enqueue only
looks the row up, once per statement, to mark the job (``flow_controlled``);
when a row is made here, the queue's waiting jobs are marked in the same
transaction, and when a worker's settings drop one, unmarked. The claim
(``sql.CLAIM_JOBS``) reads these rows and honours them in the same statement,
counting running jobs from the rows (docs/flow-control.md).

Limits come from two places. ``PGQUEUE["QUEUES"]`` gives defaults, which every
worker applies as it starts (:func:`apply_settings`, so a deploy carries a change
of them). A run-time change (:func:`configure`: the admin, the HTTP API, the
``pgqueue_queue`` command) wins over them and is shown as such
(``QueueState.source == "run time"``) until :func:`reset` hands the queue back
to the settings.

The admin, the HTTP API, the ``pgqueue_queue`` command and any other door call
these functions; none of them writes the rows itself. Bad input raises
:class:`ValueError` naming the value, before any SQL: nothing is written.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from django.db import connections, transaction

from . import sql
from .conf import get_settings
from .contract import bounded_text
from .jobs import store
from .queue_limits import CONCURRENCY_KEY_MAX_LENGTH, LIMIT_FIELDS, QueueLimits, limits, queue_name

__all__ = [
    "LIMIT_FIELDS",
    "QueueLimits",
    "QueueState",
    "apply_settings",
    "configure",
    "get",
    "is_known",
    "list_queues",
    "pause",
    "reset",
    "resume",
    "validate_concurrency_key",
    "validate_queue_name",
]

#: Where a queue's limits come from (``QueueState.source``).
SOURCE_RUN_TIME = "run time"
SOURCE_SETTINGS = "settings"


@dataclasses.dataclass(frozen=True, slots=True)
class QueueState:
    """A configured queue as ``list_queues`` reads it: its limits, pause and running jobs."""

    name: str
    concurrency: int | None
    key_concurrency: int | None
    rate_limit: int | None
    rate_period: int
    key_rate_limit: int | None
    key_rate_period: int
    overridden_at: dt.datetime | None
    paused_at: dt.datetime | None
    running: int

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    @property
    def source(self) -> str:
        """Where the limits come from: ``"run time"`` (an operator's change, which
        wins over the settings until :func:`reset`), ``"settings"``
        (``PGQUEUE["QUEUES"]`` names the queue) or ``""`` (neither: a row a pause
        made, with no limits)."""
        if self.overridden_at is not None:
            return SOURCE_RUN_TIME
        return SOURCE_SETTINGS if self.name in get_settings().QUEUES else ""

    @property
    def limits(self) -> QueueLimits:
        return QueueLimits(**{name: getattr(self, name) for name in LIMIT_FIELDS})


_STATE_FIELDS = tuple(field.name for field in dataclasses.fields(QueueState))
if tuple(name for name, _ in sql.QUEUE_STATE_COLUMNS) != _STATE_FIELDS:  # pragma: no cover
    raise ImportError("sql.QUEUE_STATE_COLUMNS and queues.QueueState disagree")
if tuple(sql.LIMIT_COLUMNS) != LIMIT_FIELDS:  # pragma: no cover
    raise ImportError("sql.LIMIT_COLUMNS and queue_limits.QueueLimits disagree")


def validate_queue_name(name: Any) -> str:
    """``name`` if it can name a queue: a non-empty string of at most 100 characters
    that PostgreSQL's ``text`` holds; ValueError naming it otherwise."""
    return queue_name(name)


def validate_concurrency_key(key: Any) -> str | None:
    """``key`` if it is None or a storable concurrency key: a non-empty string of at
    most 200 characters, no NUL character, no lone surrogate; ValueError otherwise."""
    if key is None:
        return None
    return bounded_text(
        key,
        "concurrency_key",
        max_length=CONCURRENCY_KEY_MAX_LENGTH,
        hint=" Use a shorter key (a customer id, or a hash of a long one).",
    )


def configure(
    name: str,
    *,
    concurrency: int | None = None,
    key_concurrency: int | None = None,
    rate_limit: int | None = None,
    rate_period: int = 1,
    key_rate_limit: int | None = None,
    key_rate_period: int = 1,
) -> None:
    """Set the limits of queue ``name`` at run time, making its row if it has none.

    ``concurrency``: most jobs of the queue running at once, across every worker and
    host. ``key_concurrency``: most running at once per concurrency key
    (``task.using(concurrency_key=...)``). ``rate_limit``: most jobs started per
    ``rate_period`` seconds; ``key_rate_limit``: most started per
    ``key_rate_period`` seconds per concurrency key (GCRA, as for webhook
    endpoints). None means no limit; every call sets all of them, so
    ``configure(name)`` clears a queue's limits (its pause stays as it is). The
    change wins over ``PGQUEUE["QUEUES"]`` until :func:`reset`. Workers apply it
    at their next claim.
    """
    checked = limits(
        {
            "concurrency": concurrency,
            "key_concurrency": key_concurrency,
            "rate_limit": rate_limit,
            "rate_period": rate_period,
            "key_rate_limit": key_rate_limit,
            "key_rate_period": key_rate_period,
        }
    )
    _write(sql.CONFIGURE_QUEUE, {"name": validate_queue_name(name), **checked.as_dict()})


def reset(name: str) -> bool:
    """Hand queue ``name`` back to the settings: its limits become its
    ``PGQUEUE["QUEUES"]`` entry's (none when the settings do not name it) and a
    worker's start applies the settings to it again. False when it has no row."""
    name = validate_queue_name(name)
    entry = get_settings().QUEUES.get(name) or QueueLimits()
    return _write(sql.RESET_QUEUE, {"name": name, **entry.as_dict()})


def apply_settings() -> tuple[int, int]:
    """Apply ``PGQUEUE["QUEUES"]`` to the queue rows, as every worker does when it
    starts: each named queue gets its entry's limits unless they were set at run
    time; a queue whose limits came from an entry since removed loses them.
    Returns (rows written, rows removed); a restart with unchanged settings writes
    nothing."""
    entries = get_settings().QUEUES
    params: dict[str, Any] = {"names": list(entries)}
    for field in LIMIT_FIELDS:
        params[field] = [getattr(entry, field) for entry in entries.values()]
    db = get_settings().DATABASE
    with transaction.atomic(using=db), connections[db].cursor() as cursor:
        cursor.execute(sql.APPLY_QUEUE_SETTINGS, params)
        written, removed, created, dropped = cursor.fetchone()
        if created:
            store.mark_queue_jobs(cursor, created)
        if dropped:
            store.unmark_queue_jobs(cursor, dropped)
    store.forget_configured()
    return int(written), int(removed)


def pause(name: str) -> None:
    """Pause queue ``name``: no worker claims its jobs until :func:`resume`. Running
    jobs finish; the claims stop within one poll (the next claim reads the pause)."""
    _write(sql.PAUSE_QUEUE, {"name": validate_queue_name(name)})


def resume(name: str) -> bool:
    """Resume queue ``name``; False when it was not paused (nothing changed)."""
    return _write(sql.RESUME_QUEUE, {"name": validate_queue_name(name)})


def list_queues() -> list[QueueState]:
    """Every queue that has a row, by name, with its running jobs counted from the rows."""
    return _read(None)


def get(name: str) -> QueueState | None:
    """Queue ``name``'s row, or None when it has none (no limits, not paused)."""
    found = _read(validate_queue_name(name))
    return found[0] if found else None


def is_known(name: str) -> bool:
    """Whether ``name`` is a queue in use: it has a row, a live job, or a Tasks
    backend of ours lists it in ``QUEUES`` (what the command accepts without
    ``--create``, so a typo is an error rather than a new queue)."""
    from .compat import task_backends

    name = validate_queue_name(name)
    if get(name) is not None:
        return True
    for backend in task_backends.all():
        if name in (getattr(backend, "queues", None) or ()):
            return True
    db = get_settings().DATABASE
    with connections[db].cursor() as cursor:
        cursor.execute(sql.QUEUE_HAS_LIVE_JOBS, {"name": name})
        return bool(cursor.fetchone()[0])


def _write(statement: str, params: dict[str, Any]) -> bool:
    """Run one of the queue statements; True when it wrote a row. A statement that
    made the queue's row (its second column, ``created``) also marks the queue's
    waiting jobs, in the same transaction, for the flow claim."""
    db = get_settings().DATABASE
    with transaction.atomic(using=db), connections[db].cursor() as cursor:
        cursor.execute(statement, params)
        row = cursor.fetchone()
        if row is not None and len(row) > 1 and row[1]:
            store.mark_queue_jobs(cursor, [row[0]])
    store.forget_configured()
    return row is not None


def _read(name: str | None) -> list[QueueState]:
    db = get_settings().DATABASE
    with connections[db].cursor() as cursor:
        cursor.execute(sql.LIST_QUEUES, {"name": name})
        return [QueueState(*row) for row in cursor.fetchall()]
