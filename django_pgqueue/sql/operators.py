"""Operator actions (admin, CLI): one guarded UPDATE each, reporting what it changed."""

from __future__ import annotations


def operator_update(table: str, set_clause: str) -> str:
    """An operator action (replay, retry, cancel, move to DLQ) as one guarded UPDATE.

    ``old`` locks exactly the requested rows that are in one of the allowed
    states (never ``in_progress``: a row a worker holds is skipped), so a double
    submit changes nothing the second time, and RETURNING reports each changed
    row with the state it left (for the audit log).
    """
    return f"""/* pgqueue:operator */
WITH old AS MATERIALIZED (
    SELECT id, status FROM {table}
    WHERE id = ANY(%s) AND status = ANY(%s)
    FOR UPDATE
)
UPDATE {table} AS t SET {set_clause}, updated_at = now()
FROM old WHERE t.id = old.id
RETURNING t.id, old.status
"""


def endpoint_update(table: str, guard: str, set_clause: str) -> str:
    """An operator change to endpoints (enable, disable, reset the circuit).

    Shaped like :func:`operator_update`: ``old`` locks the requested endpoints the
    change applies to (``guard``), so a repeated click changes nothing, and
    RETURNING reports the state each endpoint left, for the audit log.
    """
    return f"""/* pgqueue:endpoint_operator */
WITH old AS MATERIALIZED (
    SELECT id, is_active, breaker_state FROM {table}
    WHERE id = ANY(%s) AND ({guard})
    FOR UPDATE
)
UPDATE {table} AS t SET {set_clause}, updated_at = now()
FROM old WHERE t.id = old.id
RETURNING t.id,
    CASE WHEN old.is_active THEN 'enabled' ELSE 'disabled' END
    || ', circuit ' || old.breaker_state
"""
