"""Operator actions (admin, CLI, API, portal): one guarded UPDATE each, reporting what
it changed, and what each action sets.

``operations.py`` declares each action (the states or guard it applies to, its label,
its permission) and names here what it writes, so the SQL of every operator action
is in this module. Each ``*_SET`` is the SET clause of one action, without
``updated_at`` (the statements below add it to every change).
"""

from __future__ import annotations

from .workflows import release

# -- what the row operations of jobs and deliveries set ---------------------------------

# Back to the start: pending, due now, attempts reset, the lease cleared. The error
# history (``errors``, ``last_error``) and a job's result are kept: they are what the
# operator looked at before replaying.
REPLAY_SET = (
    "status = 'pending', attempts = 0, next_attempt_at = now(), "
    "finished_at = NULL, locked_until = NULL"
)
# A replayed job runs afresh: an abort asked of an earlier attempt must not stop it
# (deliveries cannot be aborted and have no such column).
REPLAY_JOB_SET = REPLAY_SET + ", abort_requested_at = NULL"
# A scheduled retry runs now instead of waiting out its backoff; its state (failed)
# and attempts are unchanged, so the next attempt counts as it would have.
RETRY_NOW_SET = "next_attempt_at = now()"
CANCEL_SET = "status = 'cancelled', finished_at = now()"
# The error says who stopped the retries, next to the attempts' own errors.
MOVE_TO_DLQ_SET = (
    "status = 'dead', finished_at = now(), "
    "last_error = 'Moved to the dead-letter queue by an operator'"
)
# A row not running is cancelled at once; a running one is only flagged (its lease is
# left alone) and its worker records the attempt as cancelled when it sees the flag.
# ``old.status`` is the state the row was locked in (operator_update); COALESCE keeps
# the first request's time when abort is asked twice.
ABORT_SET = (
    "abort_requested_at = COALESCE(t.abort_requested_at, now()), "
    "status = CASE WHEN old.status = 'in_progress' THEN old.status ELSE 'cancelled' END, "
    "finished_at = CASE WHEN old.status = 'in_progress' THEN t.finished_at ELSE now() END"
)

# -- what the endpoint operations set ---------------------------------------------------

# A closed circuit with nothing counted: what resetting it means, and part of enabling.
CIRCUIT_RESET_SET = (
    "breaker_state = 'closed', consecutive_failures = 0, failing_since = NULL, "
    "open_until = NULL, breaker_cooldown = 0"
)
# Enabling also closes the circuit, so the endpoint's waiting deliveries go out at once
# instead of after a cool-down earned while it was failing or disabled.
ENABLE_SET = "is_active = true, disabled_at = NULL, disabled_reason = '', " + CIRCUIT_RESET_SET
# The reason is the statement's one parameter after the ids (endpoint_update): the
# admin's and the API's default, or the caller's own (the portal's), written by the
# same guarded UPDATE, so an endpoint already disabled keeps the reason it has.
DISABLE_SET = "is_active = false, disabled_at = now(), disabled_reason = %s"


def operator_update(table: str, set_clause: str, *, releases_steps: bool = False) -> str:
    """An operator action (replay, retry, cancel, move to DLQ) as one guarded UPDATE,
    with the parameters ``ids``, ``states`` (and ``channel``, see below).

    ``old`` locks exactly the requested rows that are in one of the allowed
    states (never ``in_progress``: a row a worker holds is skipped), so a double
    submit changes nothing the second time, and RETURNING reports each changed
    row with the state it left (for the audit log).

    ``releases_steps`` (jobs): the UPDATE is the ``done`` CTE and the release of
    workflow steps follows it (sql/workflows.py, ``release``, the one the worker's
    completion runs), so a step an operator ends (cancelled, dead) applies its
    failure to its children in the same statement; ``channel`` is the NOTIFY
    channel that wakes workers for a child made due. Rows that are no step, or
    that the action does not end, give the release nothing to read.
    """
    update_sql = f"""UPDATE {table} AS t SET {set_clause}, updated_at = now()
FROM old WHERE t.id = old.id"""
    locked_sql = f"""old AS MATERIALIZED (
    SELECT id, status FROM {table}
    WHERE id = ANY(%(ids)s) AND status = ANY(%(states)s)
    ORDER BY id
    FOR UPDATE
)"""
    if not releases_steps:
        return f"""/* pgqueue:operator */
WITH {locked_sql}
{update_sql}
RETURNING t.id, old.status
"""
    release_sql = release("done")
    return f"""/* pgqueue:operator_steps */
WITH RECURSIVE {locked_sql}, done AS (
{update_sql}
RETURNING t.id, t.status, t.workflow_id, old.status AS was
), {release_sql}
SELECT done.id, done.was FROM done WHERE (SELECT pg_catalog.count(*) FROM woken) >= 0
"""


def row_states(table: str) -> str:
    """The current state of the requested rows an operator action did not change.

    Read after the UPDATE, in its transaction, to tell the operator why each was
    skipped (held by a worker, in another state, deleted); a row missing from the
    answer no longer exists. No lock: it explains, it decides nothing.
    """
    return f"""/* pgqueue:operator_skipped */
SELECT id, status FROM {table} WHERE id = ANY(%s)
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
