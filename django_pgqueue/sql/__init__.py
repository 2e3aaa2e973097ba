"""Every raw SQL statement of the queue, named, with why it is shaped so.

One module per concern: ``jobs`` (enqueue, claim, complete, leases, atomic jobs),
``deliveries`` (events, fan-out, the deliveries' claim, completion and breaker),
``operators`` (admin and CLI actions), ``maintenance`` (retention, checks),
``periodic`` (the scheduler), ``workers`` (heartbeats), ``dashboard`` (the admin's
and ``pgqueue_status``'s reads), ``api`` (the HTTP API's authentication and rate
limit), and ``fragments``: the pieces several statements share (table names, the
claim's frame, the LeaseExpired text), each built once.
Every name is also importable from this package (``sql.CLAIM_JOBS``).

Rules kept by every statement here:

* Values are always parameters; identifiers come from ``_meta.db_table`` only.
* Time is always the database clock (``now()`` is the statement's start in the
  autocommit sessions the worker uses), never the application's: hosts with a
  skewed clock can neither reclaim early nor hold a lease forever.
* Worker statements are single autocommit statements, so no transaction is ever
  held open across user code or HTTP.
* Each statement starts with a ``/* pgqueue:<name> */`` marker so it can be
  found in ``pg_stat_statements`` and targeted by fault-injection tests.

Statements for the worker use psycopg's ``%(name)s`` placeholders; those run on a
Django cursor (enqueue, results) use positional ``%s``.
"""

from __future__ import annotations

from .api import (
    API_KEY_TABLE,
    API_RATE_TABLE,
    AUTHENTICATE,
    RATE_RETRY_AFTER,
)
from .dashboard import (
    DELIVERY_OVERVIEW,
    ESTIMATED_ROWS,
    EXACT_TERMINAL_ROWS,
    JOB_OVERVIEW,
)
from .deliveries import (
    ANY_DUE_DELIVERIES,
    ANY_LEFT_DELIVERIES,
    CLAIM_DELIVERIES,
    COMPLETE_DELIVERIES,
    DELIVERIES_DUE_NOW,
    DELIVERY_RETRIES_DUE_NOW,
    EXTEND_DELIVERY_LEASES,
    INSERT_EVENT,
    READ_DELIVERY_OUTCOMES,
    RECORD_APPLICATION_EVENT,
    RECORD_EVENT,
    REFUSED_DELIVERIES_DUE_NOW,
)
from .fragments import (
    APPLICATION_TABLE,
    ATTEMPT_TABLE,
    DELIVERY_TABLE,
    ENDPOINT_TABLE,
    EVENT_TABLE,
    IN_QUEUES,
    JOB_TABLE,
    PARKED,
    PARKED_AT,
    QUEUE_TABLES,
    SCHEDULE_TABLE,
    TICK_TABLE,
    WORKER_TABLE,
)
from .jobs import (
    ANY_DUE,
    ANY_LEFT,
    ATOMIC_DUE,
    ATOMIC_LEFT,
    ATOMIC_TIMEOUTS,
    CLAIM_ATOMIC_JOB,
    CLAIM_JOBS,
    COMPLETE_ATOMIC_JOB,
    COMPLETE_JOBS,
    COPY_JOBS,
    COPY_TAIL_COLUMNS,
    EXTEND_JOB_LEASES,
    GET_JOB,
    INSERT_JOB,
    INSERT_JOBS,
    INSERT_KEYED_JOB,
    LIVE_JOB_WITH_KEY,
    NEW_JOB_COLUMNS,
    NOTIFY,
    READ_OUTCOMES,
    READ_TRACE_CONTEXTS,
    RECORD_ATOMIC_FAILURE,
    RESERVE_JOB_IDS,
    RETRIES_DUE_NOW,
    STORE_TRACE_CONTEXT,
    copy_tail,
)
from .maintenance import (
    MISSING_TABLES,
    PRUNE_CANDIDATES,
    PRUNE_COUNT,
    PRUNE_COUNT_EVENTS,
    PRUNE_DELIVERIES,
    PRUNE_EVENTS,
    PRUNE_JOBS,
    prune_candidates,
    prune_count,
)
from .operators import (
    ABORT_SET,
    CANCEL_SET,
    CIRCUIT_RESET_SET,
    DISABLE_SET,
    ENABLE_SET,
    MOVE_TO_DLQ_SET,
    REPLAY_JOB_SET,
    REPLAY_SET,
    RETRY_NOW_SET,
    endpoint_update,
    operator_update,
    row_states,
)
from .periodic import (
    ADVANCE_SCHEDULE,
    DATABASE_NOW,
    INSERT_TICK,
    SCHEDULE_STATE,
    SET_TICK_JOB,
    UPSERT_SCHEDULE,
)
from .workers import (
    HEARTBEAT,
    HEARTBEAT_STOP,
    QUEUES_NEVER_SEEN,
    WORKERS,
)

__all__ = [
    "ABORT_SET",
    "ADVANCE_SCHEDULE",
    "ANY_DUE",
    "ANY_DUE_DELIVERIES",
    "ANY_LEFT",
    "ANY_LEFT_DELIVERIES",
    "API_KEY_TABLE",
    "API_RATE_TABLE",
    "APPLICATION_TABLE",
    "ATOMIC_DUE",
    "ATOMIC_LEFT",
    "ATOMIC_TIMEOUTS",
    "ATTEMPT_TABLE",
    "AUTHENTICATE",
    "CANCEL_SET",
    "CIRCUIT_RESET_SET",
    "CLAIM_ATOMIC_JOB",
    "CLAIM_DELIVERIES",
    "CLAIM_JOBS",
    "COMPLETE_ATOMIC_JOB",
    "COMPLETE_DELIVERIES",
    "COMPLETE_JOBS",
    "COPY_JOBS",
    "COPY_TAIL_COLUMNS",
    "DATABASE_NOW",
    "DELIVERIES_DUE_NOW",
    "DELIVERY_OVERVIEW",
    "DELIVERY_RETRIES_DUE_NOW",
    "DELIVERY_TABLE",
    "DISABLE_SET",
    "ENABLE_SET",
    "ENDPOINT_TABLE",
    "ESTIMATED_ROWS",
    "EVENT_TABLE",
    "EXACT_TERMINAL_ROWS",
    "EXTEND_DELIVERY_LEASES",
    "EXTEND_JOB_LEASES",
    "GET_JOB",
    "HEARTBEAT",
    "HEARTBEAT_STOP",
    "INSERT_EVENT",
    "INSERT_JOB",
    "INSERT_JOBS",
    "INSERT_KEYED_JOB",
    "INSERT_TICK",
    "IN_QUEUES",
    "JOB_OVERVIEW",
    "JOB_TABLE",
    "LIVE_JOB_WITH_KEY",
    "MISSING_TABLES",
    "MOVE_TO_DLQ_SET",
    "NEW_JOB_COLUMNS",
    "NOTIFY",
    "PARKED",
    "PARKED_AT",
    "PRUNE_CANDIDATES",
    "PRUNE_COUNT",
    "PRUNE_COUNT_EVENTS",
    "PRUNE_DELIVERIES",
    "PRUNE_EVENTS",
    "PRUNE_JOBS",
    "QUEUES_NEVER_SEEN",
    "QUEUE_TABLES",
    "RATE_RETRY_AFTER",
    "READ_DELIVERY_OUTCOMES",
    "READ_OUTCOMES",
    "READ_TRACE_CONTEXTS",
    "RECORD_APPLICATION_EVENT",
    "RECORD_ATOMIC_FAILURE",
    "RECORD_EVENT",
    "REFUSED_DELIVERIES_DUE_NOW",
    "REPLAY_JOB_SET",
    "REPLAY_SET",
    "RESERVE_JOB_IDS",
    "RETRIES_DUE_NOW",
    "RETRY_NOW_SET",
    "SCHEDULE_STATE",
    "SCHEDULE_TABLE",
    "SET_TICK_JOB",
    "STORE_TRACE_CONTEXT",
    "TICK_TABLE",
    "UPSERT_SCHEDULE",
    "WORKERS",
    "WORKER_TABLE",
    "copy_tail",
    "endpoint_update",
    "operator_update",
    "prune_candidates",
    "prune_count",
    "row_states",
]
