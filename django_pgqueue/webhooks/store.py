"""Every state change of a webhook delivery on the worker path, and its breaker's.

``webhooks/delivery_source.DeliverySource`` calls these functions and never runs
SQL itself; the statements are in ``sql/deliveries.py`` with why each is shaped
so. They run on the worker's own autocommit psycopg connections.

The completion writes, in one statement, the deliveries' outcomes, their attempt
log rows and their endpoints' circuit breakers: an attempt is logged exactly when
its outcome lands, and a breaker only moves for outcomes that did. Every write to
a claimed delivery is guarded by its claim token.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import sql
from ..db import PositionalStatement, array_literal, run_lease_extension, text_array_literal
from ..outcomes import DeliveryOutcome
from . import breaker

# Both are longer than psycopg's 4 KiB query cache (see PositionalStatement).
_CLAIM = PositionalStatement(sql.CLAIM_DELIVERIES)
_COMPLETE = PositionalStatement(sql.COMPLETE_DELIVERIES)


def claim(conn: Any, params: dict[str, Any], max_in_flight: int | None) -> list[tuple[Any, ...]]:
    """Claim up to ``params['limit']`` deliveries: lapsed ones, one probe per open
    circuit whose cool-down is over, and due ones, fairly across endpoints and within
    their in-flight (``max_in_flight``: the default limit) and rate limits.

    Rows come back ``in_progress`` with a fresh token and what sending needs
    (secrets still encrypted), or ``dead`` (a lapsed delivery out of attempts) or
    ``failed`` (a lapsed delivery whose endpoint is not sendable, put back to wait).
    """
    return _CLAIM.fetchall(conn, {**params, "max_in_flight": max_in_flight})


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
    conn: Any, outcomes: Sequence[DeliveryOutcome], worker_id: str, conf: Mapping[str, Any]
) -> Completed:
    """Write a batch of attempts: the deliveries, their attempt log rows (``worker_id``
    recorded on each) and their endpoints' breakers (``conf``: ``PGQUEUE["WEBHOOKS"]``)."""
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
        "bodies": text_array_literal([o.body for o in outcomes]),
        "truncated": array_literal(["true" if o.truncated else "false" for o in outcomes]),
        "errors": text_array_literal([o.error for o in outcomes]),
        "verdicts": array_literal([str(o.verdict) for o in outcomes]),
        "worker_id": worker_id,
        **breaker.breaker_params(conf),
    }
    rows = _COMPLETE.fetchall(conn, params)
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
