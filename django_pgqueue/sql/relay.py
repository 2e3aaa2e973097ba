"""The relay's claim: a relay endpoint's next deliveries, in event order, as one batch.

A relay endpoint (``Endpoint.relay``, a broker destination) hands its events to the
broker in batches: the outbox pattern, with the delivery rows as the outbox. The
rows, their completion (``COMPLETE_DELIVERIES``), their attempt log, breaker,
replay and dead letters are the deliveries' own; only the claim differs.
"""

from __future__ import annotations

from .fragments import (
    CLAIMABLE_SQL,
    CLAIMED_FOR_SENDING_SQL,
    DELIVERY_TABLE,
    ENDPOINT_TABLE,
    LIVE_SQL,
    PLAN_EACH_RUN_WORKER,
)

# Claim one batch per relay endpoint: its oldest live deliveries, in id order, up to
# the first one that cannot go now.
#
# * ``ep``: relay endpoints that are active and not paused by their breaker, each
#   locked ``SKIP LOCKED``: one claim at a time per endpoint, across every worker.
#   The least recently served first, so one claim serves the endpoints in turn.
# * ``head``: per endpoint, its first ``limit`` live deliveries by id (the due index
#   ``(endpoint_id, ...)`` narrows it to the endpoint; live rows only).
# * ``run``: the unbroken prefix of due, waiting rows. A delivery in flight (the
#   previous batch, or a lapsed lease the deliveries' claim has not put back yet)
#   or waiting for its retry ends the prefix: nothing of the endpoint goes out
#   before it, so the broker receives the endpoint's events in event order, and
#   every ordering key's with them. Parked rows are never due.
# * ``claimed``: the batch shares one token, so its rows are held, extended and
#   fenced together; ``served``: the endpoints' round-robin stamp.
CLAIM_RELAY_BATCHES = f"""/* pgqueue:claim_relay_batches */
WITH ep AS MATERIALIZED (
    SELECT e.id FROM {ENDPOINT_TABLE} AS e
    WHERE e.relay AND e.is_active
      AND (e.breaker_state = 'closed' OR e.open_until <= now())
    ORDER BY e.served_at NULLS FIRST, e.id
    LIMIT %(endpoints)s
    FOR UPDATE OF e SKIP LOCKED
), head AS MATERIALIZED (
    SELECT h.id, ep.id AS endpoint_id,
           h.status IN {CLAIMABLE_SQL} AND h.next_attempt_at <= now() AS ready
    FROM ep CROSS JOIN LATERAL (
        SELECT d.id, d.status, d.next_attempt_at FROM {DELIVERY_TABLE} AS d
        WHERE d.endpoint_id = ep.id AND d.status IN {LIVE_SQL}
        ORDER BY d.id
        LIMIT %(limit)s
    ) AS h
), run AS MATERIALIZED (
    SELECT w.id, w.endpoint_id, w.token FROM (
        SELECT h.id, h.endpoint_id,
               pg_catalog.bool_and(h.ready) OVER (PARTITION BY h.endpoint_id ORDER BY h.id)
                   AS unbroken,
               pg_catalog.first_value(gen_random_uuid())
                   OVER (PARTITION BY h.endpoint_id ORDER BY h.id) AS token
        FROM head AS h
    ) AS w
    WHERE w.unbroken
), served AS (
    UPDATE {ENDPOINT_TABLE} AS e SET served_at = clock_timestamp()
    WHERE e.id IN (SELECT endpoint_id FROM run)
), claimed AS (
    UPDATE {DELIVERY_TABLE} AS d SET
        status = 'in_progress',
        attempts = d.attempts + 1,
        locked_by = r.token,
        locked_until = now() + pg_catalog.make_interval(secs => %(lease)s),
        worker_id = %(worker_id)s,
        started_at = COALESCE(d.started_at, now()),
        last_attempted_at = now(),
        updated_at = now()
    FROM run AS r
    WHERE d.id = r.id AND d.status IN {CLAIMABLE_SQL} AND {PLAN_EACH_RUN_WORKER}
    RETURNING d.id, d.status, d.locked_by, d.attempts, d.max_attempts, d.endpoint_id,
              d.event_id
)
{CLAIMED_FOR_SENDING_SQL}
ORDER BY c.endpoint_id, c.id
"""
