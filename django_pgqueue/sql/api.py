"""The HTTP API's SQL (``api/http.py``): authentication and the per-key rate limit, in
one statement. The package's rules hold here too (see ``sql/__init__.py``)."""

from __future__ import annotations

from .fragments import APPLICATION_TABLE, ASYNC_COMMIT_SQL

API_KEY_TABLE = "pgqueue_api_key"
API_RATE_TABLE = "pgqueue_api_rate"

# One round trip per request, in autocommit (never inside the event's transaction,
# where the rate row's lock would be held until the event commits and serialise a
# key's requests behind each other):
#
# * ``found``: the key row by its public prefix. Python compares its hash with
#   ``hmac.compare_digest``: that comparison decides; the SQL below only repeats it
#   as a guard (comparing two SHA-256 digests leaks nothing about the key).
# * ``hit``: the rate limit, GCRA on one row per key. ``tat`` is when the key's
#   allowance is full again; a request costs ``interval`` seconds (window / limit)
#   and is allowed while ``tat`` stays within ``window`` of now. The UPSERT's WHERE
#   refuses by not updating: a row back means allowed, none means over the limit
#   (the outer SELECT then reads ``tat`` from its snapshot for Retry-After). The
#   cost comes in as ``EXCLUDED.tat - now()``, the interval the INSERT computed. One row
#   per key, updated in place, holds across processes and hosts; no window edge
#   lets a client send twice the limit, as a fixed window does.
# * Asynchronous commit (``relaxed``, ASYNC_COMMIT_SQL) for this statement's own
#   transaction: the row lock of a busy key is released without waiting for the WAL
#   flush; a crash may forget the last few requests' cost, which a rate limit can
#   afford.
# * ``used``: ``last_used_at``, written at most once a minute per key, so a busy key
#   costs no extra row version per request. Data-modifying CTEs always run.
AUTHENTICATE = f"""/* pgqueue:api_authenticate */
WITH relaxed AS (SELECT {ASYNC_COMMIT_SQL}), found AS (
    SELECT k.id, k.key_hash, k.scopes, k.application_id, k.revoked_at,
           a.uid AS application_uid, a.is_active AS application_active,
           -- seconds one request costs; NULL: no limit for this key
           %(window)s::float8 / COALESCE(k.rate_limit, %(default_limit)s) AS cost
    FROM {API_KEY_TABLE} AS k LEFT JOIN {APPLICATION_TABLE} AS a ON a.id = k.application_id
    WHERE k.prefix = %(prefix)s
), valid AS (
    SELECT f.id, f.cost FROM found AS f, relaxed
    WHERE f.key_hash = %(key_hash)s AND f.revoked_at IS NULL
), hit AS (
    INSERT INTO {API_RATE_TABLE} AS r (key_id, tat)
    SELECT v.id, now() + pg_catalog.make_interval(secs => v.cost) FROM valid AS v
    WHERE v.cost IS NOT NULL
    ON CONFLICT (key_id) DO UPDATE
        SET tat = GREATEST(r.tat, now()) + (EXCLUDED.tat - now())
        WHERE GREATEST(r.tat, now()) + (EXCLUDED.tat - now())
              <= now() + pg_catalog.make_interval(secs => %(window)s)
    RETURNING r.key_id
), used AS (
    UPDATE {API_KEY_TABLE} AS k SET last_used_at = now()
    FROM valid AS v
    WHERE k.id = v.id
      AND (k.last_used_at IS NULL OR k.last_used_at < now() - interval '60 seconds')
    RETURNING k.id
)
SELECT f.id, f.key_hash, f.scopes, f.application_id, f.application_uid, f.revoked_at,
       -- read with the key, so an application switched off stops its keys at once
       f.application_active,
       f.cost IS NULL OR EXISTS (SELECT 1 FROM hit) AS allowed,
       extract(epoch FROM (
           SELECT GREATEST(r.tat, now()) + pg_catalog.make_interval(secs => f.cost)
                  - pg_catalog.make_interval(secs => %(window)s) - now()
           FROM {API_RATE_TABLE} AS r WHERE r.key_id = f.id
       ))::float8 AS retry_after
FROM found AS f
"""

# Seconds until a refused key may send again, read in a statement of its own. The
# authentication statement's own Retry-After comes from its snapshot, taken before
# the UPSERT waited for a concurrent request's lock: a request refused just after
# another process created or moved the key's row would read the older ``tat`` (or
# none) and tell the client to retry in a second. A new statement sees the row as
# the refusal did; only refused requests pay this second round trip.
RATE_RETRY_AFTER = f"""/* pgqueue:api_retry_after */
SELECT extract(epoch FROM (
           GREATEST(r.tat, now())
           + pg_catalog.make_interval(secs => %(window)s::float8
                                   / COALESCE(k.rate_limit, %(default_limit)s))
           - pg_catalog.make_interval(secs => %(window)s) - now()
       ))::float8
FROM {API_RATE_TABLE} AS r JOIN {API_KEY_TABLE} AS k ON k.id = r.key_id
WHERE r.key_id = %(key_id)s
"""
