"""Statements of webhooks: events, fan-out, and the deliveries' claim, completion and leases.

Events fan out to deliveries in the caller's transaction (Django cursor, ``%s``);
the worker claims, completes and extends deliveries exactly as it does jobs
(psycopg connections, ``%(name)s``), plus two things jobs do not have: each
endpoint's circuit breaker, changed only by single UPDATEs so concurrent workers
never lose a count, and the attempt log, written by the statement that writes
the attempt's outcome so an attempt is logged if and only if its outcome is.
"""

from __future__ import annotations

from .fragments import (
    APPLICATION_TABLE,
    ATTEMPT_TABLE,
    CLAIMABLE_SQL,
    CLAIMED_FOR_SENDING_SQL,
    DELIVERY_TABLE,
    ENDPOINT_TABLE,
    EVENT_TABLE,
    LIVE_SQL,
    PARKED,
    PLAN_EACH_RUN_IDS,
    PLAN_EACH_RUN_WORKER,
    TERMINAL_SQL,
    extend_leases,
    lapsed_source,
    lease_expired_error,
    picked,
    rate_allowance,
    rate_tat_after,
    read_outcomes,
    unnest_picked,
)
from .rollup import ALL_IDS_WRITTEN, rollup_add

# One event, in the caller's transaction. With an idempotency key, a second send
# (even a concurrent one: ON CONFLICT waits for the first transaction) inserts
# nothing and returns no row; the caller then reads the first event. ``payload``
# is parsed from the very text stored in ``body``, the bytes that get signed.
INSERT_EVENT = f"""/* pgqueue:insert_event */
INSERT INTO {EVENT_TABLE} (
    event_type, payload, body, msg_id, idempotency_key, application_id, channels, ordering_key,
    created_at)
VALUES (%s, %s::jsonb, %s, %s, %s, %s, %s::jsonb, %s, now())
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id, created_at
"""

# An event and its deliveries, in one statement: one round trip where an event
# INSERT then a fan-out INSERT were two (docs/performance.md, "HTTP API ingest").
# Data-modifying CTEs share the statement's snapshot, so ``fanned`` cannot read
# ``event``'s table for the new row; it joins the row ``event`` RETURNs instead.
#
# * ``app`` (application events only): the application the event names, read in
#   the same statement rather than by a lookup of its own (one round trip more).
#   The event is written only if it is active; the last SELECT returns what it
#   found in any case, so the caller tells "no application" and "inactive" apart
#   and raises before anything else, as the lookup did.
# * ``event``: INSERT_EVENT's row and its idempotency: with a key already used
#   (even by a concurrent transaction: ON CONFLICT waits for it), nothing is
#   inserted and ``event`` is empty, so ``fanned`` inserts nothing either. The
#   caller then reads the first event by its own query: this statement's snapshot
#   predates the concurrent commit and cannot see it.
# * ``fanned``: one delivery per active endpoint subscribed to the event,
#   set-based: one statement whatever the number of endpoints.
#   - Tenancy: the endpoints of the event's application, or the global ones
#     (application NULL) for an event sent without one. The two shapes are two
#     statements rather than ``IS NOT DISTINCT FROM`` (which no index answers):
#     each is one range of ``pgq_ep_app_idx``, so the cost follows the endpoints of
#     that application and not the number of applications.
#   - Type: an empty ``event_types`` subscribes to everything; otherwise it holds
#     the type or one of its wildcards (``order.*``): the caller passes the type
#     and its wildcards (routing.subscription_keys) and ``?|`` asks for any of them.
#   - Channels: an endpoint without channels takes every event; one with channels
#     only events that carry one of them.
#   A FIFO endpoint's delivery gets its ordering key here ('' puts all of an
#   endpoint's deliveries in one line; a keyed endpoint's deliveries without a
#   key are not ordered).
# * ``body`` is one parameter used twice, so it has one type: ``text``, said
#   explicitly. Bound on the server (db.execute_one), a bare ``%(body)s::jsonb``
#   would make it ``jsonb`` and the stored body, the bytes that get signed, would be
#   PostgreSQL's re-serialization of the payload instead of the text sent.
# * The last SELECT always returns one row (LEFT JOINs from a one-row VALUES):
#   the application found and whether it is active (NULL, NULL without one), the
#   event's id and ``created_at`` (NULL when the key was used before) and how many
#   deliveries were queued, counted from ``fanned`` since the statement's own row
#   count is the SELECT's.
_RECORD_EVENT = f"""/* pgqueue:{{name}} */
WITH {{app}}event AS (
    INSERT INTO {EVENT_TABLE} (
        event_type, payload, body, msg_id, idempotency_key, application_id, channels,
        ordering_key, created_at)
    SELECT %(event_type)s, %(body)s::text::jsonb, %(body)s::text, %(msg_id)s, %(idempotency_key)s,
           {{application_id}}, %(channels_json)s::jsonb, %(ordering_key)s, now(){{from_app}}
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id, created_at, application_id
), fanned AS (
    INSERT INTO {DELIVERY_TABLE} (
        event_id, endpoint_id, status, attempts, max_attempts, next_attempt_at,
        worker_id, last_error, created_at, updated_at, ordering_key
    )
    SELECT v.id, e.id, 'pending', 0, %(max_attempts)s, now(), '', '', now(),
           now(), CASE e.ordering WHEN 'endpoint' THEN '' WHEN 'key' THEN %(ordering_key)s END
    FROM event AS v JOIN {ENDPOINT_TABLE} AS e ON {{tenant}}
    WHERE e.is_active{{subscribed}}
    RETURNING 1
)
SELECT {{found}}, v.id, v.created_at, (SELECT pg_catalog.count(*) FROM fanned)
FROM (VALUES (1)) AS one {{join_app}}LEFT JOIN event AS v ON true
"""
_SUBSCRIBED = """
      AND (e.event_types = '[]'::jsonb OR e.event_types ?| %(type_keys)s::text[])
      AND (e.channels = '[]'::jsonb OR e.channels ?| %(channels)s::text[])"""
RECORD_EVENT = _RECORD_EVENT.format(
    name="record_event",
    app="",
    application_id="NULL::bigint",
    from_app="",
    tenant="e.application_id IS NULL",
    subscribed=_SUBSCRIBED,
    found="NULL::bigint, NULL::boolean",
    join_app="",
)
RECORD_APPLICATION_EVENT = _RECORD_EVENT.format(
    name="record_application_event",
    app=f"""app AS (
    SELECT id, is_active FROM {APPLICATION_TABLE} WHERE uid = %(application)s
), """,
    application_id="a.id",
    from_app="\n    FROM app AS a WHERE a.is_active",
    tenant="e.application_id = v.application_id",
    subscribed=_SUBSCRIBED,
    found="a.id, a.is_active",
    join_app="LEFT JOIN app AS a ON true ",
)

# The test event of one endpoint (the admin's, the API's and the portal's "send a
# test event"), through the same fan-out as every event, so its delivery is shaped,
# ordered, claimed and signed exactly as a real one: ``target`` is the endpoint, if
# it exists and is active (otherwise nothing is written and the caller says so); the
# event belongs to its application; the delivery goes to it whatever it subscribes
# to, since the test is of the receiver, not of the subscription.
RECORD_TEST_EVENT = _RECORD_EVENT.format(
    name="record_test_event",
    app=f"""target AS (
    SELECT id, application_id FROM {ENDPOINT_TABLE} WHERE id = %(endpoint)s AND is_active
), """,
    application_id="t.application_id",
    from_app="\n    FROM target AS t",
    tenant="e.id = %(endpoint)s",
    subscribed="",
    found="NULL::bigint, NULL::boolean",
    join_app="",
)

# Delivery ``d`` may go now as far as FIFO ordering goes: it has no ordering key,
# or it is the head of its key (no older delivery of the key waiting or in flight)
# and nothing of its key is in flight (a replayed older delivery waits for a
# newer one already out). Answered by ``pgq_dlv_fifo_idx``, which holds only
# FIFO deliveries that are not finished.
_FIFO_HEAD = f"""(d.ordering_key IS NULL OR NOT EXISTS (
              SELECT 1 FROM {DELIVERY_TABLE} AS o
              WHERE o.endpoint_id = d.endpoint_id AND o.ordering_key = d.ordering_key
                AND o.status IN {LIVE_SQL} AND o.id <> d.id
                AND (o.id < d.id OR o.status = 'in_progress')))"""

# Deliveries of endpoint ``e`` in flight (claimed, not yet completed), through the
# small partial index ``pgq_dlv_flight_idx``: prefetched rows a worker holds count.
_IN_FLIGHT = f"""SELECT pg_catalog.count(*) FROM {DELIVERY_TABLE} AS f
               WHERE f.endpoint_id = e.id AND f.status = 'in_progress'"""

# Requests endpoint ``e`` may start now under its rate limit (NULL: no limit), and
# its rate state moved on by the ``s.n`` requests a claim took: GCRA
# (fragments.rate_allowance), the same as the job queues'.
_RATE_ALLOWANCE = rate_allowance("e")
_RATE_TAT_AFTER = rate_tat_after("e", "s.n")

# Claim up to ``limit`` deliveries in the claim's frame (fragments.py: materialized
# sources with SKIP LOCKED, lapsed leases first, the picked ids joined back through
# ``unnest``), with CLAIM_JOBS's attempt count and fresh token, plus the
# breaker and fair, throttled claiming across endpoints (docs/webhooks.md,
# "Fairness").
#
# * ``due`` only takes deliveries of active endpoints whose circuit is closed: an
#   open or disabled endpoint's deliveries stay as they are, attempts unburnt.
# * ``probe_endpoints`` / ``probes`` / ``half_opened``: an open circuit whose
#   cool-down is over sends exactly one probe. The endpoint row is locked with
#   SKIP LOCKED and moved to ``half_open`` in this statement, so a concurrent
#   claim either skips the locked row or, once this commits, no longer matches
#   ``open_until <= now()``. ``open_until`` then bounds the probe (a lease): if its
#   worker dies, the next claim after that sends a new probe.
# * A lapsed delivery whose endpoint is no longer sendable is not run: it goes
#   back to ``failed``, due at once, and waits for its endpoint like the others.
# * A lapsed attempt is written to the attempt log here (the worker that made it
#   died before it could), so the log shows every attempt that may have reached
#   the receiver.
#
# Fairness and limits, without reading the backlog:
#
# * ``busy``: the endpoints that have waiting deliveries, by a skip scan of the
#   due index ``(endpoint_id, next_attempt_at, id)``: one index descent per such
#   endpoint, however many deliveries each one holds. (PostgreSQL 15 has no skip
#   scan of its own; the recursive CTE is the classic loose index scan.) Ordering
#   by ``(endpoint_id, next_attempt_at)`` matches only the due index, so the planner
#   cannot walk the foreign key's index instead, which also holds every finished
#   delivery.
# * ``candidates``: of those, the endpoints a delivery could go to now (due work,
#   circuit closed, room under the in-flight limit, a rate-limit token left), in
#   round-robin order: least recently served first (``served_at``). Round robin
#   rather than oldest-delivery-first is the point: an endpoint with a large or
#   slow backlog gets its turn like the others instead of holding every slot.
#   Round robin over endpoints, rather than a weighted share, needs no state but
#   one timestamp per endpoint, and an endpoint's limits bound its share anyway.
#   In-flight deliveries are counted through ``pgq_dlv_flight_idx`` (in_progress
#   rows only: a few per endpoint at most).
# * Relay endpoints (``e.relay``) are the relay's (sql/relay.py): never candidates
#   or probes here. A lapsed relay delivery is put back to wait (not sendable: it
#   comes back 'failed', with its LeaseExpired entry) for the relay to send in order.
# * ``locked``: the candidates' endpoint rows are locked in id order (waiting,
#   not skipping: a completion's breaker update holds a row for a moment, and
#   skipping it would make a one-endpoint claim come back empty). The count of
#   in-flight rows read by this statement is from its snapshot; a claim that
#   committed after that snapshot is invisible to it. Every claim therefore
#   stamps ``served_at`` on the endpoints it took from, and ``locked`` keeps an
#   endpoint only if the locked (newest) row still carries the ``served_at`` of
#   the snapshot: READ COMMITTED re-checks the condition against the newest row
#   version while ``candidates`` keeps the snapshot's copy, so an endpoint served
#   since the snapshot drops out of this claim and is taken by the next. The
#   limit thus holds across processes and hosts without a counter that could
#   drift.
# * ``rooms``: how many each endpoint may take: the least of what its in-flight
#   limit leaves, its rate-limit tokens (GCRA, see _RATE_ALLOWANCE) and an equal
#   share of the batch (so one claim spreads over the endpoints it serves).
# * ``due``: per endpoint, its oldest due deliveries, at most its room. FIFO
#   deliveries (``ordering_key`` set) are taken only at the head of their key:
#   no older delivery of the key still waiting or in flight, and none in flight.
# * ``served``: the endpoints taken from get their ``served_at`` stamp (the round
#   robin cursor and the fence above) and their rate-limit state moved on.
_CLAIM_DELIVERY_PICKED = (
    "id",
    "exhausted",
    "sendable",
    "lapsed",
    "old_attempt",
    "old_worker",
    "old_started",
)
_LAPSED_DELIVERIES = lapsed_source(
    """d.id, d.attempts >= d.max_attempts AS exhausted,
           (e.is_active AND e.breaker_state = 'closed' AND NOT e.relay) AS sendable,
           d.attempts AS old_attempt, d.worker_id AS old_worker,
           d.last_attempted_at AS old_started""",
    f"{DELIVERY_TABLE} AS d JOIN {ENDPOINT_TABLE} AS e ON e.id = d.endpoint_id",
    "d",
)
_PICKED_DELIVERIES = picked(
    _CLAIM_DELIVERY_PICKED,
    """SELECT id, exhausted, sendable, true AS lapsed, old_attempt, old_worker, old_started
        FROM lapsed
        UNION ALL
        SELECT id, false, true, false, NULL::int, NULL::text, NULL::timestamptz FROM probes
        UNION ALL
        SELECT id, false, true, false, NULL::int, NULL::text, NULL::timestamptz FROM due""",
)
_DELIVERY_LEASE_EXPIRED = lease_expired_error("d.worker_id")
_UNNEST_PICKED_DELIVERIES = unnest_picked(_CLAIM_DELIVERY_PICKED)

# "Has endpoint ``e`` a delivery due now?", asked per endpoint the claim looks at,
# as "is its oldest waiting delivery due?": a scalar sub-select ordered like the
# due index ``(endpoint_id, next_attempt_at, id)``, so the answer is one descent of
# that index whatever the statistics say (no other index gives that order without a
# sort). Written as ``EXISTS``, PostgreSQL may turn it into a semi-join and, once
# the table is analysed with a large backlog, hash every due delivery by endpoint:
# a sequential scan of the backlog on every claim (20,000 rows for a one-endpoint
# backlog of 20,000 in tests/test_plans.py); kept as a per-row ``EXISTS`` it may
# still prefer a sequential scan "until the first match". A scalar sub-select is
# never pulled up into a join. Parked deliveries (PARKED) are never due.
_HAS_DUE = f"""(SELECT d.next_attempt_at FROM {DELIVERY_TABLE} AS d
           WHERE d.endpoint_id = e.id AND d.status IN {CLAIMABLE_SQL}
           ORDER BY d.next_attempt_at LIMIT 1) <= now()"""
CLAIM_DELIVERIES = f"""/* pgqueue:claim_deliveries */
WITH RECURSIVE {_LAPSED_DELIVERIES}, probe_endpoints AS MATERIALIZED (
    SELECT e.id FROM {ENDPOINT_TABLE} AS e
    WHERE e.is_active AND e.breaker_state IN ('open', 'half_open') AND e.open_until <= now()
      AND NOT e.relay AND {_HAS_DUE}
    LIMIT GREATEST(0, %(limit)s - (SELECT pg_catalog.count(*) FROM lapsed))
    FOR UPDATE OF e SKIP LOCKED
), probes AS MATERIALIZED (
    SELECT x.id, pe.id AS endpoint_id
    FROM probe_endpoints AS pe
    CROSS JOIN LATERAL (
        SELECT d.id FROM {DELIVERY_TABLE} AS d
        WHERE d.endpoint_id = pe.id AND d.status IN {CLAIMABLE_SQL}
          AND d.next_attempt_at <= now()
        ORDER BY d.next_attempt_at, d.id
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    ) AS x
), half_opened AS (
    UPDATE {ENDPOINT_TABLE} AS e SET
        breaker_state = 'half_open',
        open_until = now() + pg_catalog.make_interval(secs => %(lease)s),
        updated_at = now()
    FROM probes AS p WHERE e.id = p.endpoint_id
    RETURNING e.id
), walk(endpoint_id) AS (
    (SELECT d.endpoint_id FROM {DELIVERY_TABLE} AS d
     WHERE d.status IN {CLAIMABLE_SQL}
     ORDER BY d.endpoint_id, d.next_attempt_at LIMIT 1)
    UNION ALL
    SELECT (SELECT d.endpoint_id FROM {DELIVERY_TABLE} AS d
            WHERE d.status IN {CLAIMABLE_SQL} AND d.endpoint_id > w.endpoint_id
            ORDER BY d.endpoint_id, d.next_attempt_at LIMIT 1)
    FROM walk AS w WHERE w.endpoint_id IS NOT NULL
), free AS MATERIALIZED (
    SELECT GREATEST(0, %(limit)s - (SELECT pg_catalog.count(*) FROM lapsed)
                       - (SELECT pg_catalog.count(*) FROM probes)) AS n
), candidates AS MATERIALIZED (
    SELECT e.id, e.served_at
    FROM walk AS w JOIN {ENDPOINT_TABLE} AS e ON e.id = w.endpoint_id
    WHERE e.is_active AND e.breaker_state = 'closed' AND NOT e.relay
      AND COALESCE({_RATE_ALLOWANCE}, 1) > 0
      AND (COALESCE(e.max_in_flight, %(max_in_flight)s::int) IS NULL
           OR COALESCE(e.max_in_flight, %(max_in_flight)s::int) > ({_IN_FLIGHT}))
      AND {_HAS_DUE}
    ORDER BY e.served_at NULLS FIRST, e.id
    LIMIT (SELECT n FROM free)
), locked AS MATERIALIZED (
    SELECT e.id, LEAST(
               CASE WHEN COALESCE(e.max_in_flight, %(max_in_flight)s::int) IS NOT NULL
                    THEN COALESCE(e.max_in_flight, %(max_in_flight)s::int) - ({_IN_FLIGHT}) END,
               {_RATE_ALLOWANCE}) AS room
    FROM {ENDPOINT_TABLE} AS e JOIN candidates AS c ON c.id = e.id
    WHERE e.served_at IS NOT DISTINCT FROM c.served_at
      AND e.is_active AND e.breaker_state = 'closed'
    ORDER BY e.id
    FOR UPDATE OF e
), rooms AS MATERIALIZED (
    SELECT l.id, LEAST(l.room, pg_catalog.ceil((SELECT n FROM free)::numeric
                                   / GREATEST(1, (SELECT pg_catalog.count(*) FROM locked)))::int)
           AS room
    FROM locked AS l
), due AS MATERIALIZED (
    SELECT x.id, r.id AS endpoint_id
    FROM rooms AS r
    CROSS JOIN LATERAL (
        SELECT d.id FROM {DELIVERY_TABLE} AS d
        WHERE d.endpoint_id = r.id AND d.status IN {CLAIMABLE_SQL}
          AND d.next_attempt_at <= now()
          AND {_FIFO_HEAD}
        ORDER BY d.next_attempt_at, d.id
        LIMIT r.room
        FOR UPDATE OF d SKIP LOCKED
    ) AS x
    WHERE r.room > 0
    LIMIT (SELECT n FROM free)
), served AS (
    UPDATE {ENDPOINT_TABLE} AS e SET
        served_at = clock_timestamp(),
        rate_tat = {_RATE_TAT_AFTER}
    FROM (SELECT endpoint_id, pg_catalog.count(*) AS n FROM due GROUP BY endpoint_id) AS s
    WHERE e.id = s.endpoint_id
), {_PICKED_DELIVERIES}, claimed AS (
    UPDATE {DELIVERY_TABLE} AS d SET
        status = CASE WHEN p.exhausted THEN 'dead'
                      WHEN p.sendable THEN 'in_progress' ELSE 'failed' END,
        attempts = CASE WHEN p.sendable AND NOT p.exhausted THEN d.attempts + 1
                        ELSE d.attempts END,
        locked_by = CASE WHEN p.sendable AND NOT p.exhausted THEN gen_random_uuid()
                         ELSE d.locked_by END,
        locked_until = CASE WHEN p.sendable AND NOT p.exhausted
                            THEN now() + pg_catalog.make_interval(secs => %(lease)s) END,
        worker_id = CASE WHEN p.sendable AND NOT p.exhausted THEN %(worker_id)s
                         ELSE d.worker_id END,
        started_at = COALESCE(d.started_at, now()),
        last_attempted_at = CASE WHEN p.sendable AND NOT p.exhausted THEN now()
                                 ELSE d.last_attempted_at END,
        next_attempt_at = CASE WHEN p.sendable OR p.exhausted THEN d.next_attempt_at
                               ELSE now() END,
        finished_at = CASE WHEN p.exhausted THEN now() END,
        last_error = CASE WHEN p.lapsed THEN {_DELIVERY_LEASE_EXPIRED}
                          ELSE d.last_error END,
        updated_at = now()
    FROM {_UNNEST_PICKED_DELIVERIES}
    WHERE d.id = p.id AND {PLAN_EACH_RUN_WORKER}
    RETURNING d.id, d.status, d.locked_by, d.attempts, d.max_attempts, d.endpoint_id,
              d.event_id, p.lapsed, p.old_attempt, p.old_worker, p.old_started
), lapse_log AS (
    INSERT INTO {ATTEMPT_TABLE} (
        delivery_id, attempt, started_at, duration_ms, response_headers, response_body,
        response_truncated, error, worker_id, created_at)
    SELECT c.id, c.old_attempt, COALESCE(c.old_started, now()), 0, '{{}}', '', false,
           'LeaseExpired: the worker stopped renewing its lease before recording an '
           || 'outcome (it crashed, was killed or lost the database); the receiver may '
           || 'have got this attempt', c.old_worker, now()
    FROM claimed AS c WHERE c.lapsed AND c.old_attempt >= 1
)
{CLAIMED_FOR_SENDING_SQL}
ORDER BY row_number() OVER (PARTITION BY c.endpoint_id ORDER BY c.id), c.endpoint_id
"""

# The breaker's rules, each written once (COMPLETE_DELIVERIES): a closed circuit
# trips when its failures in a row (``e``, the endpoint, plus ``s.failures``, this
# batch's) reach the threshold; a failed probe reopens it for twice its last
# cool-down, at least BREAKER_COOLDOWN and at most BREAKER_MAX_COOLDOWN.
_TRIPS = "e.consecutive_failures + s.failures >= %(threshold)s"
_NEXT_COOLDOWN = "LEAST(%(max_cooldown)s, GREATEST(%(cooldown)s, e.breaker_cooldown * 2))"


# Write a batch of delivery outcomes, their attempt rows and their endpoints'
# breakers in one statement (one transaction: an attempt is logged exactly when
# its outcome lands).
#
# * ``done`` is COMPLETE_JOBS's fenced UPDATE: a stale token writes nothing, and
#   then nothing is logged and no breaker moves either (``logged`` and
#   ``verdicts`` join ``done``). Verdicts are those of webhooks/breaker.py: 'none'
#   (released unsent) is not logged, 'local' (our side failed) does not move the
#   breaker. "Still held" is ``locked_until IS NOT NULL`` (equivalent to
#   ``status = 'in_progress'`` by the lease_iff_running CHECK): naming ``status``
#   would match the partial lease index's predicate and tempt the planner into
#   scanning that index's dead entries instead of one primary-key lookup per row.
# * ``breaker``: one UPDATE per endpoint with the batch's verdicts aggregated.
#   Counters are incremented in place (``consecutive_failures + n``) under the
#   row lock, never read and written back, so concurrent workers cannot lose a
#   failure. A success closes the circuit; reaching the threshold, or a failed
#   probe, opens it for a cool-down that doubles (capped) while failures go on. A
#   410 Gone, or failing without a success for DISABLE_AFTER, deactivates the
#   endpoint with a reason; its deliveries stay as they are.
# * ``done`` parks a row that goes back to waiting while its endpoint is disabled
#   (see PARKED_AT); an endpoint this very statement disables is parked by the
#   trigger once the statement is over.
# * ``deferred``: when this statement opens a circuit, the endpoint's waiting
#   deliveries are moved to the end of the cool-down. The claim would skip them
#   anyway; moving them keeps them from being scanned on every claim meanwhile.
def _complete_deliveries(count_sql: str = "") -> str:
    """The completion of a batch of delivery attempts; ``count_sql`` adds one more
    CTE (the rollup's count, COMPLETE_COUNTED_DELIVERIES) after the last one. The
    marker is the same either way: it is the completion."""
    return f"""/* pgqueue:complete_deliveries */
WITH v AS (
    SELECT * FROM unnest(
        (SELECT %(ids)s::bigint[]), (SELECT %(tokens)s::uuid[]),
        (SELECT %(statuses)s::text[]), (SELECT %(delays)s::float8[]),
        (SELECT %(last_errors)s::text[]), (SELECT %(refunds)s::int[]),
        (SELECT %(attempts)s::int[]), (SELECT %(started)s::timestamptz[]),
        (SELECT %(durations)s::int[]), (SELECT %(codes)s::int[]),
        (SELECT %(headers)s::text[]), (SELECT %(bodies)s::text[]),
        (SELECT %(truncated)s::bool[]), (SELECT %(errors)s::text[]),
        (SELECT %(verdicts)s::text[]), (SELECT %(request_headers)s::text[])
    ) AS v(id, token, status, delay, last_error, refund, attempt, started_at, duration_ms,
           status_code, headers, body, truncated, error, verdict, request_headers)
), done AS (
    UPDATE {DELIVERY_TABLE} AS d SET
        status = v.status,
        locked_until = NULL,
        finished_at = CASE WHEN v.status IN {TERMINAL_SQL} THEN now() END,
        next_attempt_at = CASE WHEN v.status NOT IN {CLAIMABLE_SQL}
                                   THEN d.next_attempt_at
                               WHEN ep.is_active
                               THEN now() + pg_catalog.make_interval(secs => v.delay)
                               ELSE {PARKED} END,
        attempts = d.attempts - v.refund,
        last_error = COALESCE(v.last_error, d.last_error),
        updated_at = now()
    FROM v, {ENDPOINT_TABLE} AS ep
    WHERE d.id = v.id AND d.locked_by = v.token AND d.locked_until IS NOT NULL
      AND ep.id = d.endpoint_id AND {PLAN_EACH_RUN_IDS}
    RETURNING d.id, d.endpoint_id, d.status
), logged AS (
    INSERT INTO {ATTEMPT_TABLE} (
        delivery_id, attempt, started_at, duration_ms, status_code, request_headers,
        response_headers, response_body, response_truncated, error, worker_id, created_at)
    SELECT v.id, v.attempt, v.started_at, v.duration_ms, v.status_code,
           v.request_headers::jsonb, v.headers::jsonb, v.body, v.truncated, v.error,
           %(worker_id)s, now()
    FROM v JOIN done ON done.id = v.id
    WHERE v.verdict <> 'none'
), verdicts AS (
    SELECT done.endpoint_id,
           bool_or(v.verdict = 'gone') AS gone,
           bool_or(v.verdict = 'success') AS succeeded,
           pg_catalog.count(*) FILTER (WHERE v.verdict IN ('failure', 'gone')) AS failures
    FROM v JOIN done ON done.id = v.id
    WHERE v.verdict IN ('success', 'failure', 'gone')
    GROUP BY done.endpoint_id
), ordered AS MATERIALIZED (
    -- The endpoint rows are locked in id order, as the claim locks them (its
    -- ``locked``): a claim and a completion that both touch several endpoints can
    -- then never wait for each other in a cycle.
    SELECT e.id FROM {ENDPOINT_TABLE} AS e
    WHERE e.id IN (SELECT endpoint_id FROM verdicts)
    ORDER BY e.id
    FOR UPDATE
), decided AS (
    -- Whether to deactivate, read from the endpoint's snapshot: failing_since only
    -- moves on the first failure and on a success, so a stale read is harmless.
    SELECT s.*, old.breaker_state AS old_state, old.is_active AS was_active, s.gone OR (
               NOT s.succeeded AND COALESCE(
                   old.failing_since <= now() - pg_catalog.make_interval(secs => %(disable_after)s),
                   false)) AS disable
    FROM verdicts AS s JOIN {ENDPOINT_TABLE} AS old ON old.id = s.endpoint_id
    JOIN ordered ON ordered.id = s.endpoint_id
), breaker AS (
    UPDATE {ENDPOINT_TABLE} AS e SET
        is_active = e.is_active AND NOT s.disable,
        disabled_at = CASE WHEN e.is_active AND s.disable THEN now() ELSE e.disabled_at END,
        disabled_reason = CASE
            WHEN NOT (e.is_active AND s.disable) THEN e.disabled_reason
            WHEN s.gone
                THEN 'The receiver answered 410 Gone: it asked not to be sent webhooks any more.'
            ELSE 'Every delivery failed since ' || to_char(
                e.failing_since AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"')
                || ' (' || (e.consecutive_failures + s.failures) || ' failures in a row).'
            END,
        consecutive_failures = CASE WHEN s.succeeded THEN 0
                                    ELSE e.consecutive_failures + s.failures END,
        failing_since = CASE WHEN s.succeeded THEN NULL
                             ELSE COALESCE(e.failing_since, now()) END,
        last_success_at = CASE WHEN s.succeeded THEN now() ELSE e.last_success_at END,
        breaker_state = CASE
            WHEN s.succeeded THEN 'closed'
            WHEN e.breaker_state = 'half_open' OR {_TRIPS} THEN 'open'
            ELSE e.breaker_state END,
        breaker_cooldown = CASE
            WHEN s.succeeded THEN 0
            WHEN e.breaker_state = 'half_open' THEN {_NEXT_COOLDOWN}
            WHEN e.breaker_state = 'closed' AND {_TRIPS} THEN %(cooldown)s
            ELSE e.breaker_cooldown END,
        open_until = CASE
            WHEN s.succeeded THEN NULL
            WHEN e.breaker_state = 'half_open'
                THEN now() + pg_catalog.make_interval(secs => {_NEXT_COOLDOWN})
            WHEN e.breaker_state = 'closed' AND {_TRIPS}
                THEN now() + pg_catalog.make_interval(secs => %(cooldown)s)
            ELSE e.open_until END,
        updated_at = now()
    FROM decided AS s
    WHERE e.id = s.endpoint_id
    RETURNING e.id, e.breaker_state, e.open_until, s.old_state <> 'open' AS opened_now,
              s.old_state, s.was_active AND s.disable AS disabled_now
), deferred AS (
    UPDATE {DELIVERY_TABLE} AS d SET next_attempt_at = b.open_until, updated_at = now()
    FROM breaker AS b
    WHERE b.breaker_state = 'open' AND b.opened_now AND d.endpoint_id = b.id
      AND d.status IN {CLAIMABLE_SQL} AND d.next_attempt_at < b.open_until
){count_sql}
-- Each written id, with its endpoint's circuit before and after (for the metrics),
-- its new status and whether this statement disabled its endpoint (for the
-- operational signals, webhooks/operational.py).
SELECT done.id, done.endpoint_id, b.old_state, b.breaker_state, done.status,
       COALESCE(b.disabled_now, false)
FROM done LEFT JOIN breaker AS b ON b.id = done.endpoint_id
"""


COMPLETE_DELIVERIES = _complete_deliveries()
# The same, counting the batch into its endpoints' and applications' minutes of the
# console's rollup (rollup/store.py) when it wrote every row, so the counts commit
# exactly with the completions, in the one statement, as jobs do (sql/jobs.py).
_ROLLED_UP = rollup_add(ALL_IDS_WRITTEN)
COMPLETE_COUNTED_DELIVERIES = _complete_deliveries(f", rolled_up AS (\n{_ROLLED_UP}\n)")


# Settle an ambiguous commit and extend leases, as for jobs (fragments.py).
READ_DELIVERY_OUTCOMES = read_outcomes("read_delivery_outcomes", DELIVERY_TABLE)
EXTEND_DELIVERY_LEASES = extend_leases("extend_delivery_leases", DELIVERY_TABLE)

# Anything a claim could take now, or held by a worker (``--burst``'s exit test).
# Deliveries of an open circuit count only once a probe is due; FIFO deliveries
# behind a head that waits for its retry do not count, nor a relay endpoint's
# behind its oldest live delivery (the relay sends nothing past it, sql/relay.py).
# A delivery held back only by its endpoint's rate limit counts: a burst run waits
# for it.
ANY_DUE_DELIVERIES = f"""/* pgqueue:any_due_deliveries */
SELECT EXISTS (
    SELECT 1 FROM {DELIVERY_TABLE} AS d JOIN {ENDPOINT_TABLE} AS e ON e.id = d.endpoint_id
    WHERE d.status IN {CLAIMABLE_SQL} AND d.next_attempt_at <= now()
      AND e.is_active AND (e.breaker_state = 'closed' OR e.open_until <= now())
      AND {_FIFO_HEAD}
      AND (NOT e.relay OR NOT EXISTS (
          SELECT 1 FROM {DELIVERY_TABLE} AS o
          WHERE o.endpoint_id = d.endpoint_id AND o.status IN {LIVE_SQL} AND o.id < d.id))
) OR EXISTS (
    SELECT 1 FROM {DELIVERY_TABLE} WHERE status = 'in_progress'
)
"""

# Anything left to send (``--until-empty``): waiting deliveries of active
# endpoints, due or not, and held ones. A disabled endpoint's deliveries are
# parked until an operator acts, so they do not count.
ANY_LEFT_DELIVERIES = f"""/* pgqueue:any_left_deliveries */
SELECT EXISTS (
    SELECT 1 FROM {DELIVERY_TABLE} AS d JOIN {ENDPOINT_TABLE} AS e ON e.id = d.endpoint_id
    WHERE d.status IN {CLAIMABLE_SQL} AND e.is_active
) OR EXISTS (
    SELECT 1 FROM {DELIVERY_TABLE} WHERE status = 'in_progress'
)
"""

# DELIVERY retries due now (django_pgqueue.testing), as RETRIES_DUE_NOW.
DELIVERY_RETRIES_DUE_NOW = f"""/* pgqueue:delivery_retries_due_now */
UPDATE {DELIVERY_TABLE} AS d SET next_attempt_at = now()
WHERE status = 'failed' AND next_attempt_at > now() AND next_attempt_at < {PARKED}
"""

# A re-enabled endpoint's kept deliveries go out now rather than at the retry
# time they were last given (which may be hours away after days of failure).
DELIVERIES_DUE_NOW = f"""/* pgqueue:deliveries_due_now */
UPDATE {DELIVERY_TABLE} SET next_attempt_at = now(), updated_at = now()
WHERE endpoint_id = ANY(%s) AND status IN {CLAIMABLE_SQL} AND next_attempt_at > now()
"""

# Deliveries refused by the SSRF settings wait at the breaker's pace; saving their
# endpoint (a corrected URL, or after the settings changed) makes them due now. The
# refusal is read from ``last_error`` ("attempt N: refused: ..."), which is what the
# admin shows; a parked endpoint (inactive) keeps its deliveries parked.
REFUSED_DELIVERIES_DUE_NOW = f"""/* pgqueue:refused_deliveries_due_now */
UPDATE {DELIVERY_TABLE} AS d SET next_attempt_at = now(), updated_at = now()
FROM {ENDPOINT_TABLE} AS e
WHERE d.endpoint_id = %s AND e.id = d.endpoint_id AND e.is_active
  AND d.status = 'failed' AND d.next_attempt_at > now()
  AND d.last_error LIKE 'attempt %%: refused: %%'
"""
