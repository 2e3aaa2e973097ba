"""The ``PGQUEUE`` settings dict: defaults, validation and a cached accessor.

Every key is documented in ``docs/settings.md``. Read settings through
:func:`get_settings`; the cache is dropped whenever Django's ``setting_changed``
signal fires for ``PGQUEUE`` (``override_settings`` in tests).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from .retry import DEFAULT_BASE, DEFAULT_CAP
from .setting_keys import check_keys

# Here rather than in contract.py, which reads the settings: no import circle.
#: Default ``PGQUEUE["MAX_JSON_DEPTH"]``: as deep as Ruby's JSON parser allows.
DEFAULT_MAX_DEPTH = 100
#: The deepest limit the setting accepts: Django's Tasks framework rebuilds
#: arguments recursively (``normalize_json``) and fails a few hundred levels down.
DEPTH_CEILING = 200

#: Every scheme an endpoint URL may have: HTTP receivers and the broker destinations
#: (docs/webhooks.md, "Destinations"). The values PORTAL_DESTINATIONS chooses from.
DESTINATION_SCHEMES = ("https", "http", "amqp", "nats")

#: Webhook delivery defaults (``PGQUEUE["WEBHOOKS"]``). The retry schedule follows
#: Svix: immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h.
WEBHOOK_DEFAULTS: dict[str, Any] = {
    "RETRY_SCHEDULE": [0, 5, 300, 1800, 7200, 18000, 36000, 36000],
    "RETRY_JITTER": 0.2,
    "RETRY_AFTER_CAP": 3600.0,
    "CONNECT_TIMEOUT": 5.0,
    "TOTAL_TIMEOUT": 30.0,
    "RESPONSE_CAP": 20_000,
    "MAX_PAYLOAD_BYTES": 256 * 1024,
    "ALLOW_HTTP": False,
    "ALLOW_NETWORKS": [],
    "ALLOW_HOSTS": [],
    "ALLOWED_PORTS": None,
    # Request header names (any case) recorded redacted in the attempt log, on top of
    # the built-in rule of webhooks/redaction.py (Authorization, *token*, *secret*, ...).
    "REDACT_HEADERS": [],
    # Most deliveries one relay batch hands to the broker (docs/scaling.md).
    "RELAY_BATCH_SIZE": 100,
    "BREAKER_THRESHOLD": 5,
    "BREAKER_COOLDOWN": 30.0,
    "BREAKER_MAX_COOLDOWN": 3600.0,
    "DISABLE_AFTER": 5 * 24 * 3600.0,
    "SECRET_ROTATION_GRACE": 24 * 3600.0,
    "ENCRYPTION_KEYS": None,
    # Most deliveries of one endpoint in flight at once across all workers, unless
    # the endpoint sets its own; None = no limit (see docs/webhooks.md, "Fairness").
    "MAX_IN_FLIGHT": None,
    # Uid of an application of the project's own that receives the operational
    # events (endpoint disabled, breaker opened, delivery dead); None = signals only.
    "OPERATIONAL_APPLICATION": None,
    # The customer portal (docs/multi-tenant.md): dotted paths to a function of the
    # request returning the current Application (or its uid, or None), and to a
    # function (request, application) -> bool allowing the portal's pages.
    "PORTAL_APPLICATION": None,
    "PORTAL_PERMISSION": "django_pgqueue.portal.permissions.default_permission",
    # The kinds of endpoint URL a customer may add in the portal, among
    # DESTINATION_SCHEMES; each URL still passes the endpoint's own check (SSRF rules,
    # ALLOW_HTTP, the broker allow-lists).
    "PORTAL_DESTINATIONS": ["https"],
    # The event type catalogue: {"order.paid": {"description": ..., "schema": {...}}}
    # (docs/multi-tenant.md). With VALIDATE_EVENT_TYPES, send_event refuses types not
    # declared here and payloads their schema refuses.
    "EVENT_TYPES": {},
    "VALIDATE_EVENT_TYPES": False,
}

#: HTTP API defaults (``PGQUEUE["API"]``; docs/http-api.md).
API_DEFAULTS: dict[str, Any] = {
    # Requests per key per RATE_WINDOW seconds (a key may set its own); None = no limit.
    "RATE_LIMIT": 1200,
    "RATE_WINDOW": 60,
    # Largest request body accepted, in bytes (a batch of events is one body).
    "MAX_BODY_BYTES": 1024 * 1024,
    # Most events in one POST /events/batch.
    "MAX_BATCH": 100,
    # Items per page of a list, unless the request asks for fewer or more (?limit=).
    "PAGE_SIZE": 50,
    "MAX_PAGE_SIZE": 500,
    # The user the admin's log entries of API changes are by (created on first use,
    # inactive); each entry names the key. None: only a log line.
    "AUDIT_USER": "pgqueue-api",
}

DEFAULTS: dict[str, Any] = {
    # Database alias that holds the queue tables; enqueue joins its transaction.
    "DATABASE": "default",
    # How long a claim is valid without an extension. A worker that dies is
    # replaced after at most this long.
    "LEASE_SECONDS": 30.0,
    # Idle workers poll this often even without NOTIFY (the correctness backstop).
    "POLL_INTERVAL": 1.0,
    # Threads per worker process.
    "CONCURRENCY": 4,
    # Extra rows a process may hold beyond its running tasks, so threads never idle
    # between claims. None = adaptive: about 50 ms of work per thread, measured
    # from recent task durations, capped by BATCH_SIZE.
    "PREFETCH": None,
    # Upper bound on rows claimed by one statement (only short tasks reach it: the
    # adaptive prefetch keeps claims small for slow ones). 250: a fifth less CPU per
    # job than 100 on a drain of short tasks (docs/performance.md, "CPU per job").
    "BATCH_SIZE": 250,
    # LISTEN/NOTIFY wake-ups; polling still runs when this is False.
    "NOTIFY": True,
    "NOTIFY_CHANNEL": "pgqueue",
    # At most one NOTIFY per channel per window per process (trailing edge kept).
    "NOTIFY_COALESCE_SECONDS": 0.01,
    # libpq DSN for the LISTEN connection when the queue database is reached through
    # a transaction-pooling PgBouncer (LISTEN needs a session). None = same as DATABASE.
    "LISTEN_DSN": None,
    # Seconds between health queries on the LISTEN connection (half-open detection).
    "LISTEN_HEALTH_INTERVAL": 10.0,
    # Seconds a worker waits for running tasks after SIGTERM before releasing them.
    "SHUTDOWN_GRACE_SECONDS": 30.0,
    # Delay before a job whose task path cannot be imported is offered again.
    "UNKNOWN_TASK_DELAY": 60.0,
    # How long a worker keeps retrying a completion write before leaving the row to
    # its lease (the backstop).
    "COMPLETION_RETRY_SECONDS": 10.0,
    # Cap on the JSON size of a job's arguments, in bytes of UTF-8.
    "MAX_ARGS_BYTES": 1024 * 1024,
    # How deeply lists and dicts may nest in a stored JSON document: arguments,
    # webhook payloads, return values (see contract.py).
    "MAX_JSON_DEPTH": DEFAULT_MAX_DEPTH,
    # Cap on the JSON size of a task's return value, in bytes of UTF-8; a larger
    # value fails the attempt instead of being stored.
    "MAX_RESULT_BYTES": 1024 * 1024,
    # Server-side prepared statements on worker connections. Turn off behind
    # PgBouncer < 1.21 in transaction mode.
    "PREPARED_STATEMENTS": True,
    # Test-only pause points (see docs/guarantees.md); never enable in production.
    "TEST_HOOKS": False,
    # Worker log of finished attempts: "summary" (one INFO line of counts every
    # JOB_LOG_SUMMARY_SECONDS, per-attempt lines at DEBUG) or "each" (an INFO line
    # per attempt). Failures are logged one by one either way.
    "JOB_LOG": "summary",
    "JOB_LOG_SUMMARY_SECONDS": 60.0,
    # How the Prometheus gauges of webhook deliveries are labelled: "endpoint" (7
    # series per endpoint), "application" (7 per application), "total" (7 in all)
    # or "off".
    "METRICS_ENDPOINTS": "endpoint",
    # OpenTelemetry spans for enqueue, claim, run and deliver (needs the [otel] extra;
    # see tracing.py). Off by default: an enqueue then writes the trace context too.
    "TRACING": False,
    "WEBHOOKS": {},
    # The HTTP API (django_pgqueue.api): rate limit, body and page sizes.
    "API": {},
    # Periodic tasks by name: {"task": dotted path, "cron": expression, optional
    # "timezone", "args", "kwargs", "queue_name", "catch_up"} (docs/periodic.md).
    "SCHEDULE": {},
    # Seconds between two scheduler passes in each worker process.
    "SCHEDULER_INTERVAL": 2.0,
    # Missed ticks after downtime: "latest" (run the latest once), "all" or "none".
    "SCHEDULE_CATCH_UP": "latest",
    # Under catch_up "none", how late a tick may still be enqueued.
    "SCHEDULE_GRACE_SECONDS": 60.0,
    # Bound on an atomic task's transaction: its statement_timeout and
    # idle_in_transaction_session_timeout (docs/atomic-tasks.md).
    "ATOMIC_TIMEOUT_SECONDS": 300.0,
    # How long ``pgqueue_prune`` keeps terminal rows (jobs and webhook deliveries),
    # per state: a timedelta, seconds, or None to keep them until asked. The
    # dead-letter queue is kept by default.
    "RETENTION": {},
    # The console's rollup (per-minute counts and histograms the admin charts read),
    # written with each batch of completions; False writes none.
    "ROLLUP": True,
    # How long ``pgqueue_prune`` keeps rollup minutes (the charts show a day).
    "ROLLUP_RETENTION_SECONDS": 2 * 24 * 3600.0,
    # At most one progress write per job per this many seconds (``set_progress``);
    # the latest value is always written before the attempt's outcome.
    "PROGRESS_INTERVAL_SECONDS": 2.0,
    # How long a finished job stays in pgqueue_job before the workers' maintenance
    # moves it to the partitioned history (docs/operations.md, "History and
    # retention"), in seconds; None keeps finished jobs in pgqueue_job (as before).
    "HISTORY_DELAY_SECONDS": 30.0,
    # Seconds between two maintenance passes in each worker process (the mover,
    # the premade partitions).
    "MAINTENANCE_INTERVAL": 10.0,
    # Whether the workers' maintenance also applies RETENTION to the history, by
    # dropping whole partitions (else only ``pgqueue_prune`` does).
    "MAINTENANCE_RETENTION": False,
    # How long the webhook attempt log (request and response of every attempt) is
    # kept, in seconds: retention drops its day partitions once their whole day is
    # older. None keeps each attempt until its delivery is pruned.
    "ATTEMPT_RETENTION_SECONDS": 30 * 24 * 3600.0,
    # Flow control defaults of job queues by name: {"concurrency", "key_concurrency",
    # "rate_limit", "rate_period", "key_rate_limit", "key_rate_period"}, each
    # optional (docs/flow-control.md). Every worker applies them as it starts; a
    # run-time change (queues.configure, the admin, the API, the command) wins.
    "QUEUES": {},
}

#: Retention defaults (``PGQUEUE["RETENTION"]``), in seconds; None keeps forever.
RETENTION_DEFAULTS: dict[str, float | None] = {
    "succeeded": 7 * 24 * 3600.0,
    "cancelled": 30 * 24 * 3600.0,
    "dead": None,
}


@dataclass(frozen=True)
class PgQueueSettings:
    """Validated, immutable view of ``settings.PGQUEUE`` merged with defaults."""

    DATABASE: str
    LEASE_SECONDS: float
    POLL_INTERVAL: float
    CONCURRENCY: int
    PREFETCH: int | None
    BATCH_SIZE: int
    NOTIFY: bool
    NOTIFY_CHANNEL: str
    NOTIFY_COALESCE_SECONDS: float
    LISTEN_DSN: str | None
    LISTEN_HEALTH_INTERVAL: float
    SHUTDOWN_GRACE_SECONDS: float
    UNKNOWN_TASK_DELAY: float
    COMPLETION_RETRY_SECONDS: float
    MAX_ARGS_BYTES: int
    MAX_JSON_DEPTH: int
    MAX_RESULT_BYTES: int
    PREPARED_STATEMENTS: bool
    TEST_HOOKS: bool
    TRACING: bool = False
    JOB_LOG: str = "summary"
    JOB_LOG_SUMMARY_SECONDS: float = 60.0
    METRICS_ENDPOINTS: str = "endpoint"
    WEBHOOKS: Mapping[str, Any] = field(default_factory=dict)
    SCHEDULE: Mapping[str, Any] = field(default_factory=dict)
    SCHEDULER_INTERVAL: float = 2.0
    SCHEDULE_CATCH_UP: str = "latest"
    SCHEDULE_GRACE_SECONDS: float = 60.0
    ATOMIC_TIMEOUT_SECONDS: float = 300.0
    RETENTION: Mapping[str, float | None] = field(default_factory=lambda: dict(RETENTION_DEFAULTS))
    API: Mapping[str, Any] = field(default_factory=lambda: dict(API_DEFAULTS))
    ROLLUP: bool = True
    ROLLUP_RETENTION_SECONDS: float = 2 * 24 * 3600.0
    PROGRESS_INTERVAL_SECONDS: float = 2.0
    HISTORY_DELAY_SECONDS: float | None = 30.0
    MAINTENANCE_INTERVAL: float = 10.0
    MAINTENANCE_RETENTION: bool = False
    ATTEMPT_RETENTION_SECONDS: float | None = 30 * 24 * 3600.0
    QUEUES: Mapping[str, Any] = field(default_factory=dict)


def _positive_number(
    name: str, value: Any, *, allow_zero: bool = False, maximum: float | None = None
) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ImproperlyConfigured(f"{name} must be a number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        kind = "a non-negative" if allow_zero else "a positive"
        raise ImproperlyConfigured(f"{name} must be {kind} number, got {value!r}")
    if maximum is not None and value >= maximum:
        raise ImproperlyConfigured(f"{name} must be below {maximum:g}, got {value!r}")
    return float(value)


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ImproperlyConfigured(f"{name} must be a positive integer, got {value!r}")
    return value


JOB_LOG_MODES = ("summary", "each")
METRICS_ENDPOINT_MODES = ("endpoint", "application", "total", "off")


def _one_of(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ImproperlyConfigured(
            f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}"
        )
    return value


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ImproperlyConfigured(f"{name} must be True or False, got {value!r}")
    return value


def _destinations(name: str, value: Any) -> list[str]:
    if not isinstance(value, list | tuple) or not value:
        raise ImproperlyConfigured(
            f"{name} must be a list of schemes such as ['https', 'amqp'], got {value!r}"
        )
    for scheme in value:
        if scheme not in DESTINATION_SCHEMES:
            raise ImproperlyConfigured(
                f"{name} holds {scheme!r}, which is not a destination: use "
                f"{', '.join(map(repr, DESTINATION_SCHEMES))}"
            )
    return list(value)


def validate_webhooks(raw: Any) -> dict[str, Any]:
    """Merge ``PGQUEUE["WEBHOOKS"]`` with its defaults and validate every value."""
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(f"PGQUEUE['WEBHOOKS'] must be a dict, got {raw!r}")
    check_keys("PGQUEUE['WEBHOOKS']", raw, WEBHOOK_DEFAULTS)
    merged = {**WEBHOOK_DEFAULTS, **raw}
    prefix = "PGQUEUE['WEBHOOKS']"
    schedule = merged["RETRY_SCHEDULE"]
    if not isinstance(schedule, list | tuple) or not schedule:
        raise ImproperlyConfigured(
            f"{prefix}['RETRY_SCHEDULE'] must be a non-empty list of seconds, got {schedule!r}"
        )
    merged["RETRY_SCHEDULE"] = [
        _positive_number(f"{prefix}['RETRY_SCHEDULE'][{i}]", v, allow_zero=True)
        for i, v in enumerate(schedule)
    ]
    jitter = _positive_number(f"{prefix}['RETRY_JITTER']", merged["RETRY_JITTER"], allow_zero=True)
    if jitter >= 1:
        raise ImproperlyConfigured(f"{prefix}['RETRY_JITTER'] must be below 1, got {jitter!r}")
    for key in (
        "RETRY_AFTER_CAP",
        "CONNECT_TIMEOUT",
        "TOTAL_TIMEOUT",
        "BREAKER_COOLDOWN",
        "BREAKER_MAX_COOLDOWN",
        "DISABLE_AFTER",
        "SECRET_ROTATION_GRACE",
    ):
        merged[key] = _positive_number(f"{prefix}[{key!r}]", merged[key])
    for key in ("RESPONSE_CAP", "MAX_PAYLOAD_BYTES", "BREAKER_THRESHOLD", "RELAY_BATCH_SIZE"):
        merged[key] = _positive_int(f"{prefix}[{key!r}]", merged[key])
    merged["ALLOW_HTTP"] = _bool(f"{prefix}['ALLOW_HTTP']", merged["ALLOW_HTTP"])
    networks = merged["ALLOW_NETWORKS"]
    if not isinstance(networks, list | tuple):
        raise ImproperlyConfigured(f"{prefix}['ALLOW_NETWORKS'] must be a list of CIDRs")
    for cidr in networks:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except (TypeError, ValueError) as exc:
            raise ImproperlyConfigured(
                f"{prefix}['ALLOW_NETWORKS'] holds {cidr!r}, which is not a CIDR network"
            ) from exc
    hosts = merged["ALLOW_HOSTS"]
    if not isinstance(hosts, list | tuple) or not all(isinstance(h, str) and h for h in hosts):
        raise ImproperlyConfigured(
            f"{prefix}['ALLOW_HOSTS'] must be a list of host names, got {hosts!r}"
        )
    merged["ALLOW_HOSTS"] = list(hosts)
    redact = merged["REDACT_HEADERS"]
    if not isinstance(redact, list | tuple) or not all(isinstance(h, str) and h for h in redact):
        raise ImproperlyConfigured(
            f"{prefix}['REDACT_HEADERS'] must be a list of header names, got {redact!r}"
        )
    merged["REDACT_HEADERS"] = [h.lower() for h in redact]
    ports = merged["ALLOWED_PORTS"]
    if ports is not None and (
        not isinstance(ports, list | tuple | set)
        or not all(isinstance(p, int) and 0 < p < 65536 for p in ports)
    ):
        raise ImproperlyConfigured(
            f"{prefix}['ALLOWED_PORTS'] must be None or a list of port numbers, got {ports!r}"
        )
    cap = merged["MAX_IN_FLIGHT"]
    if cap is not None:
        merged["MAX_IN_FLIGHT"] = _positive_int(f"{prefix}['MAX_IN_FLIGHT']", cap)
    for key in ("OPERATIONAL_APPLICATION", "PORTAL_APPLICATION", "PORTAL_PERMISSION"):
        if merged[key] is not None and (not isinstance(merged[key], str) or not merged[key]):
            raise ImproperlyConfigured(
                f"{prefix}[{key!r}] must be None or a non-empty string, got {merged[key]!r}"
            )
    merged["PORTAL_DESTINATIONS"] = _destinations(
        f"{prefix}['PORTAL_DESTINATIONS']", merged["PORTAL_DESTINATIONS"]
    )
    from .webhooks.event_types import parse_catalogue

    merged["EVENT_TYPES"] = parse_catalogue(merged["EVENT_TYPES"], f"{prefix}['EVENT_TYPES']")
    merged["VALIDATE_EVENT_TYPES"] = _bool(
        f"{prefix}['VALIDATE_EVENT_TYPES']", merged["VALIDATE_EVENT_TYPES"]
    )
    keys = merged["ENCRYPTION_KEYS"]
    if keys is not None and (
        not isinstance(keys, list | tuple) or not keys or not all(isinstance(k, str) for k in keys)
    ):
        raise ImproperlyConfigured(
            f"{prefix}['ENCRYPTION_KEYS'] must be None or a non-empty list of Fernet keys"
        )
    return merged


def validate_api(raw: Any) -> dict[str, Any]:
    """Merge ``PGQUEUE["API"]`` with its defaults and validate every value."""
    prefix = "PGQUEUE['API']"
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(f"{prefix} must be a dict, got {raw!r}")
    check_keys(prefix, raw, API_DEFAULTS)
    merged = {**API_DEFAULTS, **raw}
    if merged["RATE_LIMIT"] is not None:
        merged["RATE_LIMIT"] = _positive_int(f"{prefix}['RATE_LIMIT']", merged["RATE_LIMIT"])
    for key in ("RATE_WINDOW", "MAX_BODY_BYTES", "MAX_BATCH", "PAGE_SIZE", "MAX_PAGE_SIZE"):
        merged[key] = _positive_int(f"{prefix}[{key!r}]", merged[key])
    if merged["RATE_WINDOW"] > 86400:
        raise ImproperlyConfigured(
            f"{prefix}['RATE_WINDOW'] must be at most 86400 seconds (a day), "
            f"got {merged['RATE_WINDOW']!r}"
        )
    if merged["MAX_BATCH"] > 1000:
        raise ImproperlyConfigured(
            f"{prefix}['MAX_BATCH'] must be at most 1000 (one transaction holds the whole "
            f"batch), got {merged['MAX_BATCH']!r}"
        )
    audit_user = merged["AUDIT_USER"]
    if audit_user is not None and (not isinstance(audit_user, str) or not audit_user.strip()):
        raise ImproperlyConfigured(
            f"{prefix}['AUDIT_USER'] must be a user name or None, got {audit_user!r}"
        )
    if merged["PAGE_SIZE"] > merged["MAX_PAGE_SIZE"]:
        raise ImproperlyConfigured(
            f"{prefix}['PAGE_SIZE'] ({merged['PAGE_SIZE']}) must not exceed "
            f"{prefix}['MAX_PAGE_SIZE'] ({merged['MAX_PAGE_SIZE']})"
        )
    return merged


def validate_retention(raw: Any) -> dict[str, float | None]:
    """Merge ``PGQUEUE["RETENTION"]`` with its defaults; every value in seconds or None."""
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(f"PGQUEUE['RETENTION'] must be a dict, got {raw!r}")
    check_keys("PGQUEUE['RETENTION']", raw, RETENTION_DEFAULTS)
    merged: dict[str, float | None] = {}
    for state, value in {**RETENTION_DEFAULTS, **raw}.items():
        if isinstance(value, dt.timedelta):
            value = value.total_seconds()
        if value is not None:
            value = _positive_number(f"PGQUEUE['RETENTION'][{state!r}]", value)
        merged[state] = value
    return merged


#: ``TASKS[alias]["OPTIONS"]`` of ``PgQueueBackend``, with their defaults.
BACKEND_OPTION_DEFAULTS: dict[str, Any] = {
    "MAX_ATTEMPTS": 5,
    "BACKOFF": None,
    "BACKOFF_BASE": DEFAULT_BASE,
    "BACKOFF_CAP": DEFAULT_CAP,
    "TIMEOUT": None,
}


def validate_backend_options(
    alias: str, raw: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """Validate a ``PgQueueBackend``'s ``OPTIONS`` with the validators of ``PGQUEUE``.

    Returns every option (its default where the given value is wrong) and one message
    per problem: the backend reports them as check E010 and on enqueue rather than
    raising while Django builds its task backends. ``BACKOFF`` comes back as a
    callable or None (a dotted path is imported here).
    """
    prefix = f"TASKS[{alias!r}]['OPTIONS']"
    problems: list[str] = []

    def valid(check: Any, *args: Any, **kwargs: Any) -> bool:
        try:
            check(*args, **kwargs)
        except ImproperlyConfigured as exc:
            problems.append(str(exc))
            return False
        return True

    valid(check_keys, prefix, raw, BACKEND_OPTION_DEFAULTS)
    options = {**BACKEND_OPTION_DEFAULTS}
    name = f"{prefix}['MAX_ATTEMPTS']"
    if valid(_positive_int, name, raw.get("MAX_ATTEMPTS", options["MAX_ATTEMPTS"])):
        options["MAX_ATTEMPTS"] = raw.get("MAX_ATTEMPTS", options["MAX_ATTEMPTS"])
    timeout = raw.get("TIMEOUT")
    if timeout is not None and valid(
        _positive_number, f"{prefix}['TIMEOUT']", timeout, maximum=2**31
    ):
        options["TIMEOUT"] = timeout
    base = raw.get("BACKOFF_BASE", DEFAULT_BASE)
    cap = raw.get("BACKOFF_CAP", DEFAULT_CAP)
    # Both or neither: a base without its cap (or the reverse) is not what was meant.
    base_valid = valid(_positive_number, f"{prefix}['BACKOFF_BASE']", base)
    cap_valid = valid(_positive_number, f"{prefix}['BACKOFF_CAP']", cap)
    if base_valid and cap_valid:
        options["BACKOFF_BASE"], options["BACKOFF_CAP"] = float(base), float(cap)
    backoff = raw.get("BACKOFF")
    if isinstance(backoff, str):
        try:
            backoff = import_string(backoff)
        except ImportError as exc:
            problems.append(f"{prefix}['BACKOFF'] = {raw['BACKOFF']!r} cannot be imported: {exc}")
            backoff = None
    if backoff is not None and not callable(backoff):
        problems.append(
            f"{prefix}['BACKOFF'] must be a callable backoff(exception, task_result) -> "
            f"seconds | None, got {backoff!r}"
        )
        backoff = None
    options["BACKOFF"] = backoff
    return options, problems


def validate_queues(raw: Any) -> dict[str, Any]:
    """``PGQUEUE["QUEUES"]`` checked: queue name -> its ``queue_limits.QueueLimits``,
    with the rules ``queues.configure`` applies, each error naming the entry."""
    from .queue_limits import LIMIT_FIELDS, limits, queue_name

    prefix = "PGQUEUE['QUEUES']"
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(
            f"{prefix} must be a dict of queue name to its limits, got {raw!r}"
        )
    checked = {}
    for name, entry in raw.items():
        where = f"{prefix}[{name!r}]"
        try:
            queue_name(name, where=f"{prefix}: ")
            if not isinstance(entry, Mapping):
                raise ValueError(f"{where} must be a dict of limits, got {entry!r}")
            check_keys(where, entry, LIMIT_FIELDS)
            checked[name] = limits(entry, where=f"{where}: ")
        except ValueError as exc:
            raise ImproperlyConfigured(str(exc)) from None
    return checked


def validate(raw: Any) -> PgQueueSettings:
    """Validate a raw ``PGQUEUE`` value; raise ImproperlyConfigured naming the problem."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(f"PGQUEUE must be a dict, got {type(raw).__name__}")
    check_keys("PGQUEUE", raw, DEFAULTS)
    merged = {**DEFAULTS, **raw}
    if not isinstance(merged["DATABASE"], str) or not merged["DATABASE"]:
        raise ImproperlyConfigured(
            f"PGQUEUE['DATABASE'] must be a database alias, got {merged['DATABASE']!r}"
        )
    concurrency = _positive_int("PGQUEUE['CONCURRENCY']", merged["CONCURRENCY"])
    prefetch = merged["PREFETCH"]
    if prefetch is not None and (
        isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0
    ):
        raise ImproperlyConfigured(
            f"PGQUEUE['PREFETCH'] must be None or a non-negative integer, got {prefetch!r}"
        )
    channel = merged["NOTIFY_CHANNEL"]
    if not isinstance(channel, str) or not channel or len(channel) > 63:
        raise ImproperlyConfigured(
            f"PGQUEUE['NOTIFY_CHANNEL'] must be a non-empty string of at most 63 "
            f"characters, got {channel!r}"
        )
    depth = _positive_int("PGQUEUE['MAX_JSON_DEPTH']", merged["MAX_JSON_DEPTH"])
    if depth > DEPTH_CEILING:
        raise ImproperlyConfigured(
            f"PGQUEUE['MAX_JSON_DEPTH'] must be at most {DEPTH_CEILING} (deeper documents "
            f"cannot be read back by Django's Tasks framework), got {depth!r}"
        )
    listen_dsn = merged["LISTEN_DSN"]
    if listen_dsn is not None and not isinstance(listen_dsn, str):
        raise ImproperlyConfigured("PGQUEUE['LISTEN_DSN'] must be None or a libpq DSN string")
    from .periodic.spec import ArgumentLimits, check_catch_up, validate_schedule

    max_args_bytes = _positive_int("PGQUEUE['MAX_ARGS_BYTES']", merged["MAX_ARGS_BYTES"])

    check_catch_up("PGQUEUE['SCHEDULE_CATCH_UP']", merged["SCHEDULE_CATCH_UP"])
    return PgQueueSettings(
        DATABASE=merged["DATABASE"],
        LEASE_SECONDS=_positive_number("PGQUEUE['LEASE_SECONDS']", merged["LEASE_SECONDS"]),
        POLL_INTERVAL=_positive_number("PGQUEUE['POLL_INTERVAL']", merged["POLL_INTERVAL"]),
        CONCURRENCY=concurrency,
        PREFETCH=prefetch,
        BATCH_SIZE=_positive_int("PGQUEUE['BATCH_SIZE']", merged["BATCH_SIZE"]),
        NOTIFY=_bool("PGQUEUE['NOTIFY']", merged["NOTIFY"]),
        NOTIFY_CHANNEL=channel,
        NOTIFY_COALESCE_SECONDS=_positive_number(
            "PGQUEUE['NOTIFY_COALESCE_SECONDS']", merged["NOTIFY_COALESCE_SECONDS"], allow_zero=True
        ),
        LISTEN_DSN=listen_dsn,
        LISTEN_HEALTH_INTERVAL=_positive_number(
            "PGQUEUE['LISTEN_HEALTH_INTERVAL']", merged["LISTEN_HEALTH_INTERVAL"]
        ),
        SHUTDOWN_GRACE_SECONDS=_positive_number(
            "PGQUEUE['SHUTDOWN_GRACE_SECONDS']", merged["SHUTDOWN_GRACE_SECONDS"], allow_zero=True
        ),
        UNKNOWN_TASK_DELAY=_positive_number(
            "PGQUEUE['UNKNOWN_TASK_DELAY']", merged["UNKNOWN_TASK_DELAY"], allow_zero=True
        ),
        COMPLETION_RETRY_SECONDS=_positive_number(
            "PGQUEUE['COMPLETION_RETRY_SECONDS']", merged["COMPLETION_RETRY_SECONDS"]
        ),
        MAX_ARGS_BYTES=max_args_bytes,
        MAX_JSON_DEPTH=depth,
        MAX_RESULT_BYTES=_positive_int("PGQUEUE['MAX_RESULT_BYTES']", merged["MAX_RESULT_BYTES"]),
        PREPARED_STATEMENTS=_bool("PGQUEUE['PREPARED_STATEMENTS']", merged["PREPARED_STATEMENTS"]),
        TEST_HOOKS=_bool("PGQUEUE['TEST_HOOKS']", merged["TEST_HOOKS"]),
        TRACING=_bool("PGQUEUE['TRACING']", merged["TRACING"]),
        JOB_LOG=_one_of("PGQUEUE['JOB_LOG']", merged["JOB_LOG"], JOB_LOG_MODES),
        METRICS_ENDPOINTS=_one_of(
            "PGQUEUE['METRICS_ENDPOINTS']", merged["METRICS_ENDPOINTS"], METRICS_ENDPOINT_MODES
        ),
        JOB_LOG_SUMMARY_SECONDS=_positive_number(
            "PGQUEUE['JOB_LOG_SUMMARY_SECONDS']", merged["JOB_LOG_SUMMARY_SECONDS"]
        ),
        WEBHOOKS=validate_webhooks(merged["WEBHOOKS"]),
        SCHEDULE=validate_schedule(merged["SCHEDULE"], ArgumentLimits(max_args_bytes, depth)),
        SCHEDULER_INTERVAL=_positive_number(
            "PGQUEUE['SCHEDULER_INTERVAL']", merged["SCHEDULER_INTERVAL"]
        ),
        SCHEDULE_CATCH_UP=merged["SCHEDULE_CATCH_UP"],
        SCHEDULE_GRACE_SECONDS=_positive_number(
            "PGQUEUE['SCHEDULE_GRACE_SECONDS']", merged["SCHEDULE_GRACE_SECONDS"]
        ),
        ATOMIC_TIMEOUT_SECONDS=_positive_number(
            "PGQUEUE['ATOMIC_TIMEOUT_SECONDS']", merged["ATOMIC_TIMEOUT_SECONDS"]
        ),
        RETENTION=validate_retention(merged["RETENTION"]),
        API=validate_api(merged["API"]),
        ROLLUP=_bool("PGQUEUE['ROLLUP']", merged["ROLLUP"]),
        ROLLUP_RETENTION_SECONDS=_positive_number(
            "PGQUEUE['ROLLUP_RETENTION_SECONDS']", merged["ROLLUP_RETENTION_SECONDS"]
        ),
        PROGRESS_INTERVAL_SECONDS=_positive_number(
            "PGQUEUE['PROGRESS_INTERVAL_SECONDS']",
            merged["PROGRESS_INTERVAL_SECONDS"],
            allow_zero=True,
        ),
        ATTEMPT_RETENTION_SECONDS=(
            None
            if merged["ATTEMPT_RETENTION_SECONDS"] is None
            else _positive_number(
                "PGQUEUE['ATTEMPT_RETENTION_SECONDS']", merged["ATTEMPT_RETENTION_SECONDS"]
            )
        ),
        HISTORY_DELAY_SECONDS=(
            None
            if merged["HISTORY_DELAY_SECONDS"] is None
            else _positive_number(
                "PGQUEUE['HISTORY_DELAY_SECONDS']", merged["HISTORY_DELAY_SECONDS"], allow_zero=True
            )
        ),
        MAINTENANCE_INTERVAL=_positive_number(
            "PGQUEUE['MAINTENANCE_INTERVAL']", merged["MAINTENANCE_INTERVAL"]
        ),
        MAINTENANCE_RETENTION=_bool(
            "PGQUEUE['MAINTENANCE_RETENTION']", merged["MAINTENANCE_RETENTION"]
        ),
        QUEUES=validate_queues(merged["QUEUES"]),
    )


@lru_cache(maxsize=1)
def get_settings() -> PgQueueSettings:
    """Return the validated ``PGQUEUE`` settings (cached until they change)."""
    return validate(getattr(settings, "PGQUEUE", None))


@receiver(setting_changed)
def _reset_cache(*, setting: str, **kwargs: Any) -> None:
    if setting == "PGQUEUE":
        get_settings.cache_clear()
