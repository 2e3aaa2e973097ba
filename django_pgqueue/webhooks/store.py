"""The webhook store: the one writer of endpoint, event and delivery rows.

Every change of those rows is made here, or by the statement a function here runs
(its SQL is in ``sql/deliveries.py`` and ``sql/endpoints.py``, with why each is
shaped so); the admin, the HTTP API, the portal, the commands and ``send_event``
call these functions and write no rows themselves (docs/architecture.md, "The
webhook store"). Two kinds of writes, never mixed in one statement:

* **Configuration** of an endpoint (URL, subscriptions, headers, limits...): by
  :func:`save_endpoint`, through ``Endpoint.save()``, which writes the columns of
  ``Endpoint.CONFIG_FIELDS`` only; its secrets by :func:`rotate_secret` and
  :func:`reencrypt_secrets`.
* **Run-time state**: the delivery claim (fairness, rate, the breaker's probe), the
  completion (outcomes, the attempt log, the breaker, the 410-disable), and the
  operator operations declared in ``operations.py`` (enable, disable, reset the
  circuit: :func:`change_endpoints`). So an edit form can never write back a stale
  breaker or a stale ``is_active``.

Events and deliveries are born in the fan-out (:func:`fan_out`: ``send_event``'s
statement, and the test event's, :func:`send_test_event`) and leave by the explicit
deletes (:func:`delete_endpoints`, :func:`delete_applications`) or retention.

On the worker path (claim, complete, leases), ``webhooks/delivery_source.DeliverySource``
calls these functions and never runs SQL itself. They run on the worker's own
autocommit psycopg connections. The completion writes, in one statement, the
deliveries' outcomes, their attempt log rows and their endpoints' circuit breakers:
an attempt is logged exactly when its outcome lands, and a breaker only moves for
outcomes that did. Every write to a claimed delivery is guarded by its claim token.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction
from django.utils import timezone

from .. import sql
from ..conf import get_settings
from ..db import (
    PositionalStatement,
    array_literal,
    execute_one,
    run_lease_extension,
    text_array_literal,
)
from ..notify import WAKE_DELIVERIES, wake_workers
from ..outcomes import DeliveryOutcome
from . import breaker

if TYPE_CHECKING:
    from ..models.webhooks import Application, Delivery, Endpoint

logger = logging.getLogger("django_pgqueue.operations")

# Both are longer than psycopg's 4 KiB query cache (see PositionalStatement).
_CLAIM = PositionalStatement(sql.CLAIM_DELIVERIES)
_COMPLETE = PositionalStatement(sql.COMPLETE_DELIVERIES)
_COMPLETE_COUNTED = PositionalStatement(sql.COMPLETE_COUNTED_DELIVERIES)
_CLAIM_RELAY = PositionalStatement(sql.CLAIM_RELAY_BATCHES)


def claim(conn: Any, params: dict[str, Any], max_in_flight: int | None) -> list[tuple[Any, ...]]:
    """Claim up to ``params['limit']`` deliveries: lapsed ones, one probe per open
    circuit whose cool-down is over, and due ones, fairly across endpoints and within
    their in-flight (``max_in_flight``: the default limit) and rate limits.

    Rows come back ``in_progress`` with a fresh token and what sending needs
    (secrets still encrypted), or ``dead`` (a lapsed delivery out of attempts) or
    ``failed`` (a lapsed delivery whose endpoint is not sendable, put back to wait).
    """
    return _CLAIM.fetchall(conn, {**params, "max_in_flight": max_in_flight})


def claim_relay(conn: Any, params: dict[str, Any], batch_size: int) -> list[tuple[Any, ...]]:
    """Claim the next batch of each relay endpoint (``sql.CLAIM_RELAY_BATCHES``): its
    oldest deliveries in event order, at most ``batch_size``, one token per batch; at
    most ``params['limit']`` endpoints. Rows as :func:`claim` returns them, ordered by
    endpoint and id. Completed by :func:`complete`, like every delivery."""
    return _CLAIM_RELAY.fetchall(
        conn, {**params, "endpoints": max(1, int(params["limit"])), "limit": batch_size}
    )


@dataclass(slots=True)
class Completed:
    """What one completion wrote."""

    #: The deliveries written (the others lost their lease).
    written: set[int] = field(default_factory=set)
    #: ``(endpoint, old state, new state)`` of each circuit the completion moved.
    circuits: set[tuple[int, str, str]] = field(default_factory=set)
    #: Endpoints the completion disabled (410 Gone, or failing for DISABLE_AFTER).
    disabled: set[int] = field(default_factory=set)
    #: Deliveries that went to ``dead``.
    dead: list[int] = field(default_factory=list)


def _literal(value: object) -> str:
    return "NULL" if value is None else str(value)


def complete(
    conn: Any,
    outcomes: Sequence[DeliveryOutcome],
    worker_id: str,
    conf: Mapping[str, Any],
    counts: Mapping[str, str] | None = None,
) -> Completed:
    """Write a batch of attempts: the deliveries, their attempt log rows (``worker_id``
    recorded on each) and their endpoints' breakers (``conf``: ``PGQUEUE["WEBHOOKS"]``).

    ``counts``, the batch's rollup rows (``rollup.store.record_params``), are added
    by the same statement if it wrote every row."""
    # Arrays go as PostgreSQL array literals (text, cast by the statement), as for
    # jobs: psycopg's list dumper adapts element by element.
    params = {
        "ids": array_literal([str(o.id) for o in outcomes]),
        "tokens": array_literal([str(o.token) for o in outcomes]),
        "statuses": array_literal([str(o.status) for o in outcomes]),
        "delays": array_literal([repr(float(o.delay)) for o in outcomes]),
        "last_errors": text_array_literal([o.last_error for o in outcomes]),
        "refunds": array_literal([str(int(o.refund)) for o in outcomes]),
        "attempts": array_literal([str(int(o.attempt)) for o in outcomes]),
        "started": text_array_literal(
            [o.started_at.isoformat() if o.started_at else None for o in outcomes]
        ),
        "durations": array_literal([str(int(o.duration_ms)) for o in outcomes]),
        "codes": array_literal([_literal(o.status_code) for o in outcomes]),
        "headers": text_array_literal([o.headers for o in outcomes]),
        "request_headers": text_array_literal([o.request_headers for o in outcomes]),
        "bodies": text_array_literal([o.body for o in outcomes]),
        "truncated": array_literal(["true" if o.truncated else "false" for o in outcomes]),
        "errors": text_array_literal([o.error for o in outcomes]),
        "verdicts": array_literal([str(o.verdict) for o in outcomes]),
        "worker_id": worker_id,
        **breaker.breaker_params(conf),
    }
    if counts is None:
        rows = _COMPLETE.fetchall(conn, params)
    else:
        rows = _COMPLETE_COUNTED.fetchall(conn, {**params, **counts})
    return Completed(
        written={r[0] for r in rows},
        circuits={(r[1], r[2], r[3]) for r in rows if r[2] is not None and r[2] != r[3]},
        disabled={r[1] for r in rows if r[5]},
        dead=[r[0] for r in rows if r[4] == "dead"],
    )


def read_outcomes(conn: Any, ids: list[int]) -> dict[int, tuple[str, uuid.UUID | None]]:
    """Current (status, locked_by) of deliveries, to settle an ambiguous commit."""
    rows = conn.execute(sql.READ_DELIVERY_OUTCOMES, {"ids": ids}).fetchall()
    return {row[0]: (row[1], row[2]) for row in rows}


def extend_leases(conn: Any, ids: list[int], tokens: list[uuid.UUID], lease: float) -> set[int]:
    """Extend the leases of held deliveries, guarded by token; return those still held."""
    return {
        row[0] for row in run_lease_extension(conn, sql.EXTEND_DELIVERY_LEASES, ids, tokens, lease)
    }


def any_due(conn: Any) -> bool:
    """Whether a delivery could be claimed now or is held by any worker (``--burst``)."""
    return bool(conn.execute(sql.ANY_DUE_DELIVERIES, prepare=False).fetchone()[0])


def any_left(conn: Any) -> bool:
    """Whether any delivery of an active endpoint is waiting or held (``--until-empty``)."""
    return bool(conn.execute(sql.ANY_LEFT_DELIVERIES, prepare=False).fetchone()[0])


def retries_due_now(conn: Any) -> None:
    """Make every scheduled delivery retry due now (testing.py)."""
    conn.execute(sql.DELIVERY_RETRIES_DUE_NOW)


# ----- events: the fan-out ------------------------------------------------------------


def fan_out(alias: str, params: Mapping[str, Any], *, for_application: bool) -> tuple[Any, ...]:
    """Insert one event and its deliveries in one statement (``sql.RECORD_EVENT``, or
    ``RECORD_APPLICATION_EVENT`` when the event is sent for one application), in the
    caller's transaction on ``alias``. Returns the statement's row: (application id,
    application active, event id, event created_at, deliveries queued); the event id
    is None when nothing was inserted. ``send_event`` checks everything before, and
    says why after."""
    statement = sql.RECORD_APPLICATION_EVENT if for_application else sql.RECORD_EVENT
    return _fan_out(alias, statement, params)


def _fan_out(alias: str, statement: str, params: Mapping[str, Any]) -> tuple[Any, ...]:
    # Server-side bound and, with PREPARED_STATEMENTS, prepared once per connection
    # (db.execute_one): parsing and planning this statement anew was about half of
    # the database's work for one event (docs/performance.md, "HTTP API ingest").
    row: tuple[Any, ...] = execute_one(
        connections[alias], statement, params, prepare=get_settings().PREPARED_STATEMENTS
    )
    return row


#: The event type of a test event.
TEST_EVENT_TYPE = "pgqueue.test"


def send_test_event(endpoint: Endpoint) -> Delivery | None:
    """Queue one ``pgqueue.test`` event to this endpoint only; returns its Delivery, or
    None when the endpoint is disabled (or gone) and nothing was queued.

    It goes through the fan-out like every event, so its delivery is signed, ordered
    and claimed fairly as a real one; it is tried once (``max_attempts=1``), so its
    outcome is in the attempt log at once. The payload says which endpoint and when,
    and nothing about who asked (the audit log records that): it is sent to the
    customer's receiver.
    """
    from ..models.webhooks import Delivery
    from .signing import new_message_id

    alias = get_settings().DATABASE
    # The envelope the receiver gets says the type and the time (webhooks/envelope.py).
    payload = {"endpoint_id": endpoint.pk}
    # The compact, ASCII-only text send_event stores (fanout.serialize_payload).
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=True)
    with transaction.atomic(using=alias):
        _, _, event_id, _, queued = _fan_out(
            alias,
            sql.RECORD_TEST_EVENT,
            {
                "endpoint": endpoint.pk,
                "event_type": TEST_EVENT_TYPE,
                "body": body,
                "msg_id": new_message_id(),
                "idempotency_key": None,
                "channels_json": "[]",
                "ordering_key": None,
                "max_attempts": 1,
            },
        )
        if not queued:
            return None
        wake_workers(alias, payload=WAKE_DELIVERIES)
        return (
            Delivery.objects.using(alias)
            .select_related("event")
            .get(event_id=event_id, endpoint_id=endpoint.pk)
        )


# ----- endpoints: configuration ---------------------------------------------------------


def save_application(application: Application) -> Application:
    """Create an application or write its fields (what the HTTP API's ``POST`` and
    ``PATCH`` call; which fields a customer may change is ``authority``'s rule, checked
    before). An ``IntegrityError`` (a uid taken) leaves nothing written."""
    alias = get_settings().DATABASE
    with transaction.atomic(using=alias):
        application.save(using=alias)
    return application


def save_endpoint(endpoint: Endpoint) -> Endpoint:
    """Create an endpoint, or write an existing one's configuration
    (``Endpoint.CONFIG_FIELDS``, never its run-time state or secrets): what the admin's,
    the API's and the portal's forms call.

    An existing endpoint's deliveries refused by configuration (the SSRF rules) are
    then due at once: whatever the edit fixed, waiting for the breaker's pace would
    only confuse. Validation (``full_clean``) is the caller's, before this.
    """
    alias = get_settings().DATABASE
    existed = endpoint.pk is not None and not endpoint._state.adding
    with transaction.atomic(using=alias):
        endpoint.save(using=alias)
        if existed:
            retry_refused_deliveries(endpoint.pk)
            # What the caller shows next (the API's answer, the admin's page) is the
            # run-time state as it is now, not as the edit loaded it.
            endpoint.refresh_from_db(using=alias, fields=endpoint.state_fields())
    return endpoint


def retry_refused_deliveries(endpoint_id: int) -> int:
    """Make an endpoint's deliveries refused by configuration due now; how many.

    Called after its configuration is saved (:func:`save_endpoint`): a corrected
    URL, or the settings changed before a restart. A disabled endpoint's deliveries
    stay parked.
    """
    alias = get_settings().DATABASE
    with connections[alias].cursor() as cursor:
        cursor.execute(sql.REFUSED_DELIVERIES_DUE_NOW, [endpoint_id])
        count = cursor.rowcount
    if count:
        wake_workers(alias, payload=WAKE_DELIVERIES)
    return count


# ----- endpoints: secrets ---------------------------------------------------------------


def _rotated(
    ciphertext: str, previous: Any, grace: float, now: dt.datetime
) -> list[dict[str, str]]:
    """The previous secrets after a rotation: the unexpired ones, and the current one
    (``ciphertext``) first, signing until ``now + grace``."""
    from .crypto import unexpired_previous

    expires = (now + dt.timedelta(seconds=grace)).isoformat()
    try:
        kept = unexpired_previous(previous, now, what="the endpoint being rotated")
    except ValueError as exc:
        # Written by SQL in a shape no secret can be read from: it signed nothing, and
        # the rotation writes a well-formed list in its place.
        logger.warning("rotate_secret: %s; replaced", exc)
        kept = []
    if ciphertext:
        kept.insert(0, {"secret": ciphertext, "expires_at": expires})
    return kept


def _write_secrets(
    cursor: Any, endpoint_id: int, ciphertext: str, previous: list[dict[str, str]]
) -> dt.datetime:
    cursor.execute(sql.WRITE_ENDPOINT_SECRETS, [ciphertext, json.dumps(previous), endpoint_id])
    updated_at: dt.datetime = cursor.fetchone()[0]
    return updated_at


def _locked_secrets(cursor: Any, endpoint_id: int) -> tuple[str, list[dict[str, str]]] | None:
    cursor.execute(sql.LOCK_ENDPOINT_SECRETS, [endpoint_id])
    row = cursor.fetchone()
    if row is None:
        return None
    previous = row[1]
    return row[0], json.loads(previous) if isinstance(previous, str) else previous


def rotate_secret(
    endpoint: Endpoint, new_secret: str | None = None, grace: float | None = None
) -> str:
    """Make ``new_secret`` (generated if None) the endpoint's current signing secret; the
    old one keeps signing for ``grace`` seconds (default ``SECRET_ROTATION_GRACE``).
    The one way to change a secret: the admin, the API and the portal call it.

    The row is locked while its secrets are read and written, and nothing else of it
    is written, so two rotations at once both keep the secret each replaced and an
    edit of the configuration meanwhile is kept. ``endpoint`` is updated in place;
    an unsaved one is saved. Returns the new secret. ``ValueError`` (naming the
    problem, never the value) for a secret that is not ``whsec_<base64>``.
    """
    from .crypto import encrypt_secret
    from .signing import generate_secret, parse_secret

    if grace is None:
        grace = get_settings().WEBHOOKS["SECRET_ROTATION_GRACE"]
    new_secret = new_secret or generate_secret()
    parse_secret(new_secret)
    now = timezone.now()
    if endpoint.pk is None:
        endpoint.previous_secrets = _rotated(
            endpoint.secret_ciphertext, endpoint.previous_secrets, grace, now
        )
        endpoint.secret = new_secret
        save_endpoint(endpoint)
        return new_secret
    alias = get_settings().DATABASE
    ciphertext = encrypt_secret(new_secret)
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        current = _locked_secrets(cursor, endpoint.pk)
        if current is None:
            raise LookupError(f"Endpoint {endpoint.pk} no longer exists; nothing was rotated")
        previous = _rotated(current[0], current[1], grace, now)
        endpoint.updated_at = _write_secrets(cursor, endpoint.pk, ciphertext, previous)
    endpoint.secret_ciphertext, endpoint.previous_secrets = ciphertext, previous
    endpoint.remember_stored_state()
    logger.info("endpoint rotate_secret: changed [%s], grace %g s", endpoint.pk, grace)
    return new_secret


def reencrypt_secrets(using: str | None = None) -> int:
    """Re-encrypt every endpoint's secrets with the first key; return how many endpoints.

    Each endpoint is updated in its own short transaction with its row locked, so a
    concurrent secret rotation is never overwritten.
    """
    from ..models.webhooks import Endpoint
    from .brokers.urls import reseal_password
    from .crypto import rotate_token

    alias = using or get_settings().DATABASE
    count = 0
    for pk in Endpoint.objects.using(alias).values_list("pk", flat=True).iterator():
        with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
            current = _locked_secrets(cursor, pk)
            if current is None:
                continue  # deleted meanwhile
            ciphertext, previous = current
            _write_secrets(
                cursor,
                pk,
                rotate_token(ciphertext),
                [{**entry, "secret": rotate_token(entry["secret"])} for entry in previous],
            )
            # A broker URL's sealed password too, under the same row lock.
            rows = Endpoint.objects.using(alias).filter(pk=pk)
            url = rows.values_list("url", flat=True).first() or ""
            if (resealed := reseal_password(url)) != url:
                rows.update(url=resealed)
        count += 1
    logger.info("endpoint reencrypt_secrets: %d endpoints re-encrypted", count)
    return count


# ----- endpoints: operator changes of run-time state -----------------------------------


def change_endpoints(
    guard: str, set_clause: str, ids: list[int], params: list[Any], *, release: bool
) -> dict[int, str]:
    """One operator change of endpoints' run-time state (``operations.py`` declares
    each: its guard and what it sets): the endpoints it changed, each with the state it
    left. ``release``: their kept deliveries are due now (enabling)."""
    from ..models.webhooks import Endpoint

    alias = get_settings().DATABASE
    conn = connections[alias]
    table = conn.ops.quote_name(Endpoint._meta.db_table)
    with transaction.atomic(using=alias), conn.cursor() as cursor:
        cursor.execute(sql.endpoint_update(table, guard, set_clause), [ids, *params])
        changed = {row[0]: row[1] for row in cursor.fetchall()}
        if release and changed:
            # Deliveries kept while it was disabled or failing go out now.
            cursor.execute(sql.DELIVERIES_DUE_NOW, [list(changed)])
            wake_workers(alias, payload=WAKE_DELIVERIES)
    return changed


# ----- deletion ---------------------------------------------------------------------


def delete_endpoints(ids: Iterable[int]) -> list[int]:
    """Delete endpoints with their deliveries and the deliveries' attempt log, in one
    statement; returns the ids deleted. Events stay (their application's)."""
    id_list = sorted({int(i) for i in ids})
    if not id_list:
        return []
    alias = get_settings().DATABASE
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(sql.DELETE_ENDPOINTS, [id_list])
        deleted = sorted(row[0] for row in cursor.fetchall())
    logger.info("endpoint delete: deleted %s", deleted)
    return deleted


def delete_applications(ids: Iterable[int]) -> int:
    """Delete applications with their endpoints, events, deliveries and attempts; returns
    how many applications. The webhook rows go by one explicit statement, then the
    application rows by the ORM, which removes what other models tie to them (API keys)."""
    from ..models.webhooks import Application

    id_list = sorted({int(i) for i in ids})
    if not id_list:
        return 0
    alias = get_settings().DATABASE
    with transaction.atomic(using=alias):
        with connections[alias].cursor() as cursor:
            cursor.execute(sql.DELETE_APPLICATION_WEBHOOKS, [id_list])
            endpoints, events = cursor.fetchone()
        deleted = Application.objects.using(alias).filter(pk__in=id_list).delete()[1]
    count = deleted.get(Application._meta.label, 0)
    logger.info(
        "application delete: deleted %s with %d endpoints and %d events",
        id_list,
        endpoints,
        events,
    )
    return count


def deletion_permissions_needed(perms_needed: set[str]) -> set[str]:
    """What the admin's delete page must still ask for when the store deletes an
    endpoint or an application: not the rows it deletes with them explicitly
    (deliveries, their attempts, events), which no operator may delete one by one
    (their admin is read-only) and which the permission to delete their endpoint or
    application covers."""
    from ..models.webhooks import Delivery, DeliveryAttempt, Event

    covered = {str(m._meta.verbose_name) for m in (Delivery, DeliveryAttempt, Event)}
    return {name for name in perms_needed if str(name) not in covered}
