"""Every state change an operator makes, declared once and applied here.

Jobs and webhook deliveries: replay, retry now, cancel, move to the DLQ, abort
(jobs only). Webhook endpoints: enable, disable, reset the circuit, rotate the
secret, send a test event, replay failed deliveries since a time, reveal the
secret; and re-encrypting stored secrets under a new key.

Each operation is one declaration (:class:`RowOperation`, :class:`EndpointOperation`):
the states it applies to (a SQL guard, and the same rule as a Python predicate
beside it, which the admin uses to show or hide a button), the state it leaves, its
label and explanation, the one permission that allows it and the line it writes to
the audit log. The admin, the portal, the management commands and the Python API
all call the functions below, and the admin's actions and buttons are built from
the declarations (``admin/queue_rows.py``, ``admin/endpoints.py``), so each rule
exists once.

Each row operation is one set-based UPDATE guarded by the states it may change
(see :func:`django_pgqueue.sql.operator_update`): rows held by a worker
(``in_progress``) are never touched, except by ``abort``, which only flags them:
the worker holding the row sees the flag and ends the attempt itself
(docs/worker.md, "Aborting a job").

What an endpoint operation writes, the webhook store (``webhooks/store.py``) writes:
it is the only writer of endpoint rows. Rotating the secret and the test event are
its functions, re-exported here beside their declarations.

Every applied operation is also logged (logger ``django_pgqueue.operations``, one
line per call, with the ids changed), so a change made from code or a command is
on record too; the admin adds a ``LogEntry`` per object with the user.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, connections, models, transaction
from django.utils.translation import gettext_lazy as _

from . import sql
from .conf import get_settings
from .models.queue import Status
from .notify import abort_channel, wake_workers

# The operations on endpoints that are not one guarded UPDATE are the webhook store's
# (it writes every endpoint row); they are named here too, beside their declarations,
# where the admin, the API, the portal and the commands find every operation.
from .webhooks.store import change_endpoints
from .webhooks.store import reencrypt_secrets as reencrypt_secrets
from .webhooks.store import retry_refused_deliveries as retry_refused_deliveries
from .webhooks.store import rotate_secret as rotate_secret
from .webhooks.store import send_test_event as send_test_event

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

    from .models.webhooks import Endpoint

logger = logging.getLogger(__name__)

#: The partial unique index of unique tasks (models.queue.Job.Meta).
UNIQUE_LIVE_INDEX = "pgq_job_unique_live"


def _always(obj: Any) -> bool:
    return True


@dataclass(frozen=True)
class Operation:
    """What every operator operation declares, whatever it changes.

    ``permission`` is a codename of the ``django_pgqueue`` app (Meta.permissions
    of the model); the admin installs ``has_<permission>_permission`` from it.
    ``scope`` is the API key scope that allows it (None: no key may), ``customer``
    whether a portal customer may apply it to their own application's objects.
    ``authority.authorize`` reads these three for every door.
    """

    kind: str  #: the model it changes: ``job``, ``delivery`` or ``endpoint``
    name: str  #: the public name: the bulk action, the URL, the API
    permission: str
    label: StrOrPromise
    done: str  #: the message after it ran: "Replayed: 3 jobs."
    explanation: StrOrPromise  #: the confirmation page's text
    bulk_label: StrOrPromise = ""  #: the action menu's entry ("" = no bulk action)
    style: str = ""  #: the button's CSS style ("default": the primary one)
    scope: str | None = None  #: the API key scope that allows it (None: no key)
    customer: bool = False  #: a portal customer may apply it to their own objects
    #: The object belongs to the whole fleet, to no application (a job queue): only
    #: the operator and the operator's keys may touch it.
    fleet: bool = False

    def applies(self, obj: Any) -> bool:
        """Whether the operation would change ``obj`` (shows its button)."""
        return True

    def audit(self, was: str) -> str:
        """The ``LogEntry`` message of one changed object: "Disable (was enabled, ...)"."""
        return f"{self.label} (was {was})"


@dataclass(frozen=True)
class RowOperation(Operation):
    """An operation on queue rows (jobs, deliveries): one guarded UPDATE.

    The guard is ``status = ANY(allowed)``; :meth:`applies` reads the same tuple.
    """

    allowed: tuple[Status, ...] = ()
    result_state: Status = Status.PENDING
    set_clause: str = ""
    #: Rows that may now be due: wake idle workers after it.
    wakes_workers: bool = False
    #: Flags running rows for their workers: tell them at once (NOTIFY), rather than
    #: at their next lease extension.
    tells_running: bool = False

    def applies(self, obj: Any) -> bool:
        return obj.status in self.allowed

    def audit(self, was: str) -> str:
        """The ``LogEntry`` message of one changed row: "Replay: dead -> pending"."""
        return f"{self.label}: {was} -> {self.result_state}"


@dataclass(frozen=True)
class EndpointOperation(Operation):
    """An operation on webhook endpoints.

    ``guard`` (SQL over ``pgqueue_endpoint``'s columns) and ``predicate`` (the same
    rule over an ``Endpoint``) are the two spellings of which endpoints it changes;
    tests/admin/test_operations.py checks they agree on every combination of state.
    Operations without ``set_clause`` (rotating the secret, a test event...) apply
    to every endpoint and are carried out by their own function below. An operation
    with a ``default_reason`` writes a reason (``disabled_reason``), the set clause's
    one parameter: that one, or the caller's own.
    """

    guard: str = "true"
    predicate: Callable[[Any], bool] = _always
    set_clause: str = ""
    default_reason: str = ""
    #: The endpoints' kept deliveries are due at once after it (enabling).
    releases_deliveries: bool = False

    def applies(self, obj: Any) -> bool:
        return self.predicate(obj)


def _row_operations(kind: str) -> dict[str, RowOperation]:
    """The row operations of jobs or deliveries. Two permissions per kind: ``replay_*``
    (the work runs again) and ``cancel_*`` (the work will not run); docs/admin.md."""
    replay, cancel = f"replay_{kind}", f"cancel_{kind}"
    operations = [
        RowOperation(
            kind,
            "replay",
            replay,
            _("Replay"),
            "Replayed",
            _("Back to pending and due now, attempts reset; the error history is kept."),
            bulk_label=_("Replay selected (back to pending)"),
            style="default",
            allowed=(Status.SUCCEEDED, Status.DEAD, Status.CANCELLED, Status.FAILED),
            result_state=Status.PENDING,
            set_clause=sql.REPLAY_JOB_SET if kind == "job" else sql.REPLAY_SET,
            wakes_workers=True,
            # A customer replays their own deliveries (the API, the portal); jobs are
            # the operator's alone.
            scope="manage" if kind == "delivery" else None,
            customer=kind == "delivery",
        ),
        RowOperation(
            kind,
            "retry_now",
            replay,
            _("Retry now"),
            "Scheduled to retry now",
            _("A failed row waiting for its retry becomes due now."),
            bulk_label=_("Retry selected now"),
            allowed=(Status.FAILED,),
            result_state=Status.FAILED,
            set_clause=sql.RETRY_NOW_SET,
            wakes_workers=True,
        ),
        RowOperation(
            kind,
            "cancel",
            cancel,
            _("Cancel"),
            "Cancelled",
            _("A pending or failed row will not run."),
            bulk_label=_("Cancel selected"),
            allowed=(Status.PENDING, Status.FAILED),
            result_state=Status.CANCELLED,
            set_clause=sql.CANCEL_SET,
        ),
        RowOperation(
            kind,
            "move_to_dlq",
            cancel,
            _("Move to DLQ"),
            "Moved to the dead-letter queue",
            _("The row stops being retried and waits in the dead-letter queue."),
            bulk_label=_("Move selected to the dead-letter queue"),
            allowed=(Status.PENDING, Status.FAILED, Status.CANCELLED),
            result_state=Status.DEAD,
            set_clause=sql.MOVE_TO_DLQ_SET,
        ),
    ]
    if kind == "job":
        operations.append(
            RowOperation(
                kind,
                "abort",
                cancel,
                _("Abort"),
                "Aborted",
                _(
                    "A pending or failed job is cancelled. A running job is told to stop: its "
                    "worker records the attempt as cancelled within a third of the lease and "
                    "discards whatever the task still returns."
                ),
                bulk_label=_("Abort selected (cancel, or stop if running)"),
                allowed=(Status.PENDING, Status.FAILED, Status.IN_PROGRESS),
                result_state=Status.CANCELLED,
                # Cancels a row not running; flags a running one for its worker.
                set_clause=sql.ABORT_SET,
                tells_running=True,
            )
        )
    return {op.name: op for op in operations}


JOB_OPERATIONS = _row_operations("job")
#: The one operation on the job history (``replay_from_history``): the jobs' replay,
#: with its permission, under its own name (its admin button's URL is its own).
HISTORY_OPERATIONS = {
    "replay": dataclasses.replace(
        JOB_OPERATIONS["replay"],
        kind="job_history",
        explanation=_(
            "Back from the history to the live table, pending and due now, attempts "
            "reset; the error history is kept."
        ),
        bulk_label=_("Replay selected (back to live, pending)"),
    )
}
DELIVERY_OPERATIONS = _row_operations("delivery")


def _circuit_dirty(e: Endpoint) -> bool:
    return e.breaker_state != "closed" or e.consecutive_failures > 0 or e.failing_since is not None


ENDPOINT_OPERATIONS: dict[str, EndpointOperation] = {
    op.name: op
    for op in (
        # The guards stay here, beside their predicates: they are two spellings of one
        # rule, read and changed together (tests/admin/test_operations.py checks they
        # agree). What each operation sets is in sql/operators.py.
        #
        # Enabling also closes the circuit, so the endpoint's waiting deliveries go
        # out at once.
        EndpointOperation(
            "endpoint",
            "enable",
            "manage_endpoint",
            _("Enable"),
            "Enabled",
            _("Deliveries go out again; the circuit is closed and its counters reset."),
            bulk_label=_("Enable selected endpoints"),
            guard="NOT is_active OR breaker_state <> 'closed'",
            predicate=lambda e: not e.is_active or e.breaker_state != "closed",
            set_clause=sql.ENABLE_SET,
            scope="manage",
            customer=True,
            releases_deliveries=True,
        ),
        EndpointOperation(
            "endpoint",
            "disable",
            "manage_endpoint",
            _("Disable"),
            "Disabled",
            _("No new deliveries are queued and nothing is sent until it is enabled again."),
            bulk_label=_("Disable selected endpoints"),
            guard="is_active",
            predicate=lambda e: e.is_active,
            set_clause=sql.DISABLE_SET,
            default_reason="Disabled by an operator",
            scope="manage",
            customer=True,
        ),
        EndpointOperation(
            "endpoint",
            "reset_circuit",
            "manage_endpoint",
            _("Reset circuit"),
            "Circuit reset",
            _("Closes the circuit breaker now instead of waiting for its next probe."),
            bulk_label=_("Reset circuit selected endpoints"),
            guard="breaker_state <> 'closed' OR consecutive_failures > 0 "
            "OR failing_since IS NOT NULL",
            predicate=_circuit_dirty,
            set_clause=sql.CIRCUIT_RESET_SET,
        ),
        EndpointOperation(
            "endpoint",
            "send_test_event",
            "manage_endpoint",
            _("Send test event"),
            "Test event queued",
            _(
                "Queues one pgqueue.test event to this endpoint only, tried once (a "
                "disabled endpoint gets none)."
            ),
            bulk_label=_("Send a test event to selected endpoints"),
            scope="manage",
            customer=True,
        ),
        EndpointOperation(
            "endpoint",
            "rotate_secret",
            "manage_endpoint_secret",
            _("Rotate secret"),
            "Secret rotated",
            _(
                "A new signing secret is made current; the old one keeps signing (both "
                "signatures are sent) for PGQUEUE['WEBHOOKS']['SECRET_ROTATION_GRACE']."
            ),
            bulk_label=_("Rotate secrets of selected endpoints"),
            scope="secrets",
            customer=True,
        ),
        EndpointOperation(
            "endpoint",
            "reveal_secret",
            "manage_endpoint_secret",
            _("Reveal secret"),
            "Revealed the signing secret",
            _("Shows the signing secret once; the view is written to the admin log."),
            scope="secrets",
            customer=True,
        ),
        # Changes deliveries, so it is allowed by their replay permission.
        EndpointOperation(
            "endpoint",
            "replay_failed",
            "replay_delivery",
            _("Replay failed since…"),
            "Replayed deliveries",
            _(
                "Every failed or dead delivery to this endpoint created since the time "
                "below goes back to pending, due now. Rows a worker holds are skipped."
            ),
            scope="manage",
            customer=True,
        ),
    )
}


def _queue_operation(name: str, permission: str, label: str, done: str, text: str) -> Operation:
    return Operation("queue", name, permission, label, done, text, scope="queues", fleet=True)


#: What may be done to a job queue's flow control (``django_pgqueue.queues`` does it):
#: the operator's alone, as a queue belongs to the whole fleet. The admin and the
#: HTTP API check these declarations (``authority.authorize``).
QUEUE_OPERATIONS: dict[str, Operation] = {
    "view": _queue_operation(
        "view", "view_queue", "See queues", "", "The queues' limits, pause and running jobs."
    ),
    "configure": _queue_operation(
        "configure",
        "change_queue",
        "Configure",
        "Configured: {n} queue.",
        "Sets every limit of the queue at run time; it wins over PGQUEUE['QUEUES'].",
    ),
    "reset": _queue_operation(
        "reset",
        "change_queue",
        "Reset to settings",
        "Reset: {n} queue.",
        "The queue's limits become its PGQUEUE['QUEUES'] entry's again.",
    ),
    "pause": _queue_operation(
        "pause",
        "pause_queue",
        "Pause",
        "Paused: {n} queue.",
        "No worker starts a job of the queue from its next claim; running jobs finish.",
    ),
    "resume": _queue_operation(
        "resume", "pause_queue", "Resume", "Resumed: {n} queue.", "Claims take its jobs again."
    ),
}

#: Reading a job (``GET /jobs/{id}`` of the HTTP API, through the job store's one
#: read): the operator's alone, as a job belongs to the whole fleet, not to one
#: application. It changes nothing, so it is no row operation of the admin's.
JOB_READ = Operation(
    "job",
    "view",
    "view_job",
    _("See jobs"),
    "",
    _("A job's state, attempts, progress and result or error, live or in the history."),
    scope="jobs",
    fleet=True,
)

#: Every declaration, by the model it changes (its ``model_name``).
OPERATIONS: dict[str, dict[str, Any]] = {
    "job": JOB_OPERATIONS,
    "delivery": DELIVERY_OPERATIONS,
    "endpoint": ENDPOINT_OPERATIONS,
    "queue": QUEUE_OPERATIONS,
}


def operations_of(model: type[models.Model]) -> dict[str, Any]:
    """The declarations of the operations on ``model`` (empty if it has none)."""
    return OPERATIONS.get(model._meta.model_name or "", {})


@dataclass
class OperationResult:
    """What an operator action did: changed rows with their previous state, and skips."""

    operation: str
    changed: dict[int, str] = field(default_factory=dict)
    skipped: dict[int, str] = field(default_factory=dict)

    @property
    def changed_count(self) -> int:
        return len(self.changed)


def _lookup(model: type[models.Model], name: str) -> Any:
    declared = operations_of(model)
    try:
        return declared[name]
    except KeyError:
        if name == "abort":
            raise ValueError(
                f"{model._meta.verbose_name_plural} cannot be aborted; only jobs can"
            ) from None
        raise ValueError(
            f"Unknown {model._meta.verbose_name} operation {name!r}; expected one of "
            f"{', '.join(declared)}"
        ) from None


def _start(operation: str, ids: Iterable[int]) -> tuple[list[int], OperationResult, str]:
    """Sorted distinct ids (a stable lock order), an empty result, the database alias."""
    return sorted({int(i) for i in ids}), OperationResult(operation), get_settings().DATABASE


def _record(model: type[models.Model], result: OperationResult) -> None:
    """The operation's line in the log: which rows it changed, how many it skipped."""
    if result.changed or result.skipped:
        logger.info(
            "%s %s: changed %s, skipped %d",
            model._meta.model_name,
            result.operation,
            sorted(result.changed),
            len(result.skipped),
        )


def apply_operation(
    model: type[models.Model], operation: str, ids: Iterable[int], *, actor: Any = None
) -> OperationResult:
    """Apply the row ``operation`` (a :data:`JOB_OPERATIONS` / :data:`DELIVERY_OPERATIONS`
    name) to the rows of ``model`` with the given ids.

    Returns which rows changed (with the state each left) and which were skipped
    with the reason (their current state, or that they no longer exist).
    ``actor`` (``authority``: an operator, a key, a portal customer): only the rows it
    may change are changed, the others skipped as not found; ``authority.Refused``
    when it may not apply the operation at all. Without one, the caller is the
    operator (Python code, a command).
    """
    op: RowOperation = _lookup(model, operation)
    id_list, result, alias = _start(operation, ids)
    if actor is not None:
        from . import authority

        id_list, result.skipped = authority.authorized_ids(actor, model, op, id_list, alias)
    if not id_list:
        return result
    conn = connections[alias]
    table = conn.ops.quote_name(model._meta.db_table)
    set_clause = op.set_clause
    # A job an operation ends may be a workflow step: the same statement applies its
    # failure to its children (sql.operator_update, ``releases_steps``).
    statement = sql.operator_update(table, set_clause, releases_steps=op.kind == "job")
    params: dict[str, Any] = {
        "states": [str(s) for s in op.allowed],
        "channel": get_settings().NOTIFY_CHANNEL,
    }
    with transaction.atomic(using=alias), conn.cursor() as cursor:
        try:
            with transaction.atomic(using=alias):
                cursor.execute(statement, {**params, "ids": id_list})
                result.changed = {row[0]: row[1] for row in cursor.fetchall()}
        except IntegrityError as exc:
            # A replayed unique job whose key another live job holds: the unique
            # index refuses it. Replay the rows one by one and skip those.
            if UNIQUE_LIVE_INDEX not in str(exc):
                raise
            for i in id_list:
                try:
                    with transaction.atomic(using=alias):
                        cursor.execute(statement, {**params, "ids": [i]})
                        result.changed.update({row[0]: row[1] for row in cursor.fetchall()})
                except IntegrityError as row_exc:
                    if UNIQUE_LIVE_INDEX not in str(row_exc):
                        raise
                    result.skipped[i] = "its unique key is held by another live job"
        if op.name == "replay" and op.kind == "job":
            _restore_downstream(cursor, [i for i, was in result.changed.items() if was in _ENDED])
        missing = [i for i in id_list if i not in result.changed and i not in result.skipped]
        if missing:
            cursor.execute(sql.row_states(table), [missing])
            current = dict(cursor.fetchall())
            for i in missing:
                state = current.get(i)
                if state is None:
                    result.skipped[i] = "no longer exists"
                elif state == Status.IN_PROGRESS:
                    result.skipped[i] = "held by a worker (in progress)"
                else:
                    result.skipped[i] = f"is {state}"
        if result.changed and op.wakes_workers:
            wake_workers(alias)
        if op.tells_running and Status.IN_PROGRESS in result.changed.values():
            wake_workers(alias, channel=abort_channel())
    _record(model, result)
    return result


#: The states whose replay brings back what a workflow step's failure settled.
_ENDED = (Status.DEAD, Status.CANCELLED)


def _restore_downstream(cursor: Any, ids: list[int]) -> None:
    """The children that replayed steps' failure settled back to waiting for them, in
    the replay's transaction: one level a statement (``sql.RESTORE_CHILDREN``), the
    steps brought back being the next level's parents. Ids of plain jobs read one
    index entry and bring nothing back."""
    while ids:
        cursor.execute(
            sql.RESTORE_CHILDREN, {"ids": ids, "cancelled_error": sql.PARENT_FAILED_ERROR}
        )
        ids = [row[0] for row in cursor.fetchall() if row[1] == Status.WAITING]


def replay(model: type[models.Model], ids: Sequence[int], *, actor: Any = None) -> OperationResult:
    """Put terminal or failed rows back to ``pending``, due now, attempts reset."""
    return apply_operation(model, "replay", ids, actor=actor)


def replay_from_history(ids: Sequence[int], *, actor: Any = None) -> OperationResult:
    """Replay finished jobs from history (``pgqueue_job_history``) back to live.

    In one transaction: the rows leave history and return to ``pgqueue_job`` as
    they were (one statement, ``sql.restore_jobs``), then the ordinary replay
    applies to them, with its permission and its rules. A row the replay skips
    (a live job holds its unique key) stays in ``pgqueue_job`` as it was, finished,
    and the mover files it again: nothing is lost either way. Ids not in history
    are skipped as such.
    """
    from .history import job_columns
    from .models import Job

    op: RowOperation = _lookup(Job, "replay")
    if actor is not None:
        from . import authority

        authority.authorize(actor, op, None)
    id_list, result, alias = _start("replay", ids)
    if not id_list:
        return result
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(sql.restore_jobs(job_columns()), [id_list])
        restored = sorted(row[0] for row in cursor.fetchall())
        if restored:
            result = apply_operation(Job, "replay", restored)
    for i in id_list:
        if i not in restored:
            result.skipped[i] = "is not in the history"
    return result


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

    A flagged attempt's worker is told at once (a NOTIFY after the commit; its next
    lease extension, within a third of ``LEASE_SECONDS``, if that is lost), tells the
    task (``is_aborted()``) and records the attempt as ``cancelled`` within moments;
    ``changed`` lists a running job with its state, ``in_progress``, until then.
    """
    return apply_operation(model, "abort", ids)


def abort_job(job: Any) -> OperationResult:
    """``django_pgqueue.abort(result)``: abort one job, given its TaskResult or id."""
    from .models.queue import Job

    return abort(Job, [int(getattr(job, "id", job))])


# ----- endpoints --------------------------------------------------------------------


def apply_endpoint_operation(
    operation: str, ids: Iterable[int], *, reason: str | None = None, actor: Any = None
) -> OperationResult:
    """Enable, disable or reset the circuit of endpoints, in one guarded UPDATE.

    ``reason``: why the endpoints are disabled (``disabled_reason``, shown in the
    admin, the portal and the API), instead of "Disabled by an operator"; only
    ``disable`` takes one. An endpoint already disabled keeps its reason.

    ``changed`` maps each changed endpoint to the state it left ("disabled,
    circuit open"); endpoints already in the wanted state are ``skipped``.
    ``actor``: as for :func:`apply_operation`.
    """
    from .models.webhooks import Endpoint

    op: EndpointOperation = _lookup(Endpoint, operation)
    if not op.set_clause:
        raise ValueError(
            f"Endpoint operation {operation!r} is not an update; call its own function"
        )
    if reason is not None and not op.default_reason:
        raise ValueError(f"Endpoint operation {operation!r} takes no reason")
    written = [reason if reason is not None else op.default_reason] if op.default_reason else []
    id_list, result, alias = _start(operation, ids)
    hidden: dict[int, str] = {}
    if actor is not None:
        from . import authority

        id_list, hidden = authority.authorized_ids(actor, Endpoint, op, id_list, alias)
    if not id_list:
        result.skipped = hidden
        return result
    result.changed = change_endpoints(
        op.guard, op.set_clause, id_list, written, release=op.releases_deliveries
    )
    existing = set(
        Endpoint.objects.using(alias).filter(pk__in=id_list).values_list("pk", flat=True)
    )
    for i in id_list:
        if i not in result.changed:
            result.skipped[i] = "already done" if i in existing else "no longer exists"
    result.skipped.update(hidden)
    _record(Endpoint, result)
    return result


def replay_endpoint_deliveries(
    endpoint_id: int, since: datetime, *, actor: Any = None
) -> OperationResult:
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
    return apply_operation(Delivery, "replay", list(ids), actor=actor)
