"""Statements of the webhook store's endpoint and application rows: their secrets and
their deletion (``webhooks/store.py`` runs them; configuration is written by
``Endpoint.save()`` through its allow-list, run-time state by the claim, the
completion and the operator operations).

They run on a Django cursor in the caller's transaction, with positional ``%s``.
"""

from __future__ import annotations

from .fragments import APPLICATION_TABLE, ATTEMPT_TABLE, DELIVERY_TABLE, ENDPOINT_TABLE, EVENT_TABLE

# The secrets of one endpoint, its row locked until the transaction ends: a rotation
# reads them, keeps the current one signing for the grace period and writes both, so
# two rotations at once each keep the secret they replaced (the second waits here).
LOCK_ENDPOINT_SECRETS = f"""/* pgqueue:lock_endpoint_secrets */
SELECT secret, previous_secrets FROM {ENDPOINT_TABLE} WHERE id = %s FOR UPDATE
"""

# The secrets and nothing else: a rotation or a re-encryption never writes back the
# configuration or the run-time state it did not read.
WRITE_ENDPOINT_SECRETS = f"""/* pgqueue:write_endpoint_secrets */
UPDATE {ENDPOINT_TABLE} SET secret = %s, previous_secrets = %s::jsonb, updated_at = now()
WHERE id = %s
RETURNING updated_at
"""

# Endpoints and everything hanging off them, explicitly: the attempt log of their
# deliveries, the deliveries, then the endpoints (events stay: they belong to their
# application and may have gone to other endpoints). One statement: every
# sub-statement sees the same snapshot, and the foreign keys are checked at its end,
# when nothing refers to a deleted row any more. ``gone`` locks the endpoints first,
# in id order as the claim and the completion lock them, so a completion running at
# the same moment either lands before the deletion or finds its delivery gone (its
# fenced UPDATE then writes nothing).
DELETE_ENDPOINTS = f"""/* pgqueue:delete_endpoints */
WITH gone AS MATERIALIZED (
    SELECT id FROM {ENDPOINT_TABLE} WHERE id = ANY(%s) ORDER BY id FOR UPDATE
), dlv AS MATERIALIZED (
    SELECT d.id FROM {DELIVERY_TABLE} AS d WHERE d.endpoint_id IN (SELECT id FROM gone)
), attempts AS (
    DELETE FROM {ATTEMPT_TABLE} WHERE delivery_id IN (SELECT id FROM dlv)
), deliveries AS (
    DELETE FROM {DELIVERY_TABLE} WHERE id IN (SELECT id FROM dlv)
)
DELETE FROM {ENDPOINT_TABLE} WHERE id IN (SELECT id FROM gone)
RETURNING id
"""

# The webhook rows of applications, explicitly, shaped as DELETE_ENDPOINTS: the
# attempts and deliveries of their endpoints and of their events, their events, their
# endpoints. The application rows themselves are deleted after it by the ORM, which
# also removes what other parts of the project tie to them (API keys).
DELETE_APPLICATION_WEBHOOKS = f"""/* pgqueue:delete_application_webhooks */
WITH app AS MATERIALIZED (
    SELECT id FROM {APPLICATION_TABLE} WHERE id = ANY(%s) ORDER BY id FOR UPDATE
), eps AS MATERIALIZED (
    SELECT id FROM {ENDPOINT_TABLE} WHERE application_id IN (SELECT id FROM app)
    ORDER BY id FOR UPDATE
), evs AS MATERIALIZED (
    SELECT id FROM {EVENT_TABLE} WHERE application_id IN (SELECT id FROM app)
), dlv AS MATERIALIZED (
    SELECT id FROM {DELIVERY_TABLE}
    WHERE endpoint_id IN (SELECT id FROM eps) OR event_id IN (SELECT id FROM evs)
), attempts AS (
    DELETE FROM {ATTEMPT_TABLE} WHERE delivery_id IN (SELECT id FROM dlv)
), deliveries AS (
    DELETE FROM {DELIVERY_TABLE} WHERE id IN (SELECT id FROM dlv)
), events AS (
    DELETE FROM {EVENT_TABLE} WHERE id IN (SELECT id FROM evs)
), endpoints AS (
    DELETE FROM {ENDPOINT_TABLE} WHERE id IN (SELECT id FROM eps)
)
SELECT (SELECT pg_catalog.count(*) FROM eps), (SELECT pg_catalog.count(*) FROM evs)
"""
