"""Webhook deliveries as a worker source: claim, sign, POST, record.

The Worker's claim loop, task threads, completer and lease keeper run deliveries
exactly as they run jobs (``worker/sources.py``). This module supplies the claim
(``sql.CLAIM_DELIVERIES``: the circuit breaker's filter and its single half-open
probe), the HTTP attempt, and the outcome write (``sql.COMPLETE_DELIVERIES``: the
row, its attempt log entry and the endpoint's breaker in one statement).

No transaction is open while a request is in flight: the claim and the completion
are separate autocommit statements on the worker's own connections.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from .. import sql
from ..conf import get_settings
from ..db import PositionalStatement
from ..models.queue import Status
from ..models.webhooks import delivery_idempotency_key
from ..storable import LAST_ERROR_CAP, storable_headers, storable_text
from ..tracing import outgoing_headers, traced_delivery
from ..worker import hooks
from ..worker.runner import Outcome, describe_exception
from ..worker.sources import Source, array_literal, text_array_literal
from . import breaker, operational
from .crypto import SecretDecryptionError, decrypt_active_secrets
from .signing import build_headers
from .transport import TransportResult, WebhookTransport

logger = logging.getLogger("django_pgqueue.webhooks")

#: Worker queue name that selects webhook deliveries (``runworkers --queues webhooks``).
QUEUE_NAME = "webhooks"

#: Callables ``(old_state, new_state)`` told of each circuit change a completion made
#: (the Prometheus metrics of ``runworkers --metrics-port``).
breaker_observers: list[Callable[[str, str], None]] = []


@dataclass(slots=True)
class ClaimedDelivery:
    """A delivery as ``sql.CLAIM_DELIVERIES`` returned it (secrets still encrypted)."""

    id: int
    status: str
    token: uuid.UUID
    attempts: int
    max_attempts: int
    endpoint_id: int
    url: str
    secret_ciphertext: str
    previous_secrets: list[dict[str, str]]
    headers: dict[str, str]
    msg_id: str
    event_type: str
    body: str
    #: Decrypted secrets by ciphertext, shared by the deliveries of one claim: a batch
    #: to one endpoint decrypts its secret once. Lives as long as the batch's items.
    decrypted: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def __repr__(self) -> str:  # never the secrets
        return f"<ClaimedDelivery {self.id} {self.event_type} -> endpoint {self.endpoint_id}>"

    @property
    def task_path(self) -> str:
        return f"{self.event_type} -> endpoint {self.endpoint_id}"

    def secrets(self, now: dt.datetime) -> list[str]:
        """Every secret to sign with (current first); raises SecretDecryptionError."""
        return decrypt_active_secrets(
            self.secret_ciphertext,
            self.previous_secrets,
            now,
            what=f"the secrets of endpoint {self.endpoint_id}",
            cache=self.decrypted,
        )


# Both are longer than psycopg's 4 KiB query cache (see PositionalStatement).
_CLAIM = PositionalStatement(sql.CLAIM_DELIVERIES)
_COMPLETE = PositionalStatement(sql.COMPLETE_DELIVERIES)


def _literal(value: object) -> str:
    return "NULL" if value is None else str(value)


class _Transports(threading.local):
    """One WebhookTransport (one keep-alive connection pool) per worker thread."""

    transport: WebhookTransport | None = None
    conf: Any = None


def transport_from_settings(conf: Any) -> WebhookTransport:
    """A transport with the budgets and SSRF policy of ``PGQUEUE["WEBHOOKS"]``."""
    return WebhookTransport(
        connect_timeout=conf["CONNECT_TIMEOUT"],
        total_timeout=conf["TOTAL_TIMEOUT"],
        response_cap=conf["RESPONSE_CAP"],
        allow_http=conf["ALLOW_HTTP"],
        allow_networks=conf["ALLOW_NETWORKS"],
        allow_hosts=conf["ALLOW_HOSTS"],
        allowed_ports=conf["ALLOWED_PORTS"],
    )


def _body_text(raw: bytes, cap: int) -> tuple[str, bool]:
    """The response body as stored, and whether it was cut here.

    The transport bounds the body at ``cap`` bytes (RESPONSE_CAP); PostgreSQL text
    cannot hold NUL, which storable_text shows as the four characters "\x00", so the
    escaped text is cut at the cap again.
    """
    text = storable_text(raw.decode("utf-8", "replace"))
    return text[:cap], len(text) > cap


class DeliverySource(Source):
    """Webhook deliveries (the ``pgqueue_delivery`` table)."""

    name = "deliveries"
    read_outcomes_sql = sql.READ_DELIVERY_OUTCOMES
    extend_leases_sql = sql.EXTEND_DELIVERY_LEASES

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self._local = _Transports()
        self.test_hooks = hooks.armed_points()

    # -- claiming --------------------------------------------------------------------

    @staticmethod
    def _selected(params: dict[str, Any]) -> bool:
        return params.get("all_queues", True) or QUEUE_NAME in params.get("queues", ())

    def claim(self, conn: Any, params: dict[str, Any]) -> list[ClaimedDelivery]:
        if not self._selected(params):
            return []
        rows = _CLAIM.fetchall(
            conn, {**params, "max_in_flight": get_settings().WEBHOOKS["MAX_IN_FLIGHT"]}
        )
        # A short claim may have left deliveries behind for their endpoints' limits:
        # claim again when ours complete (they free room) instead of at the next poll.
        self.claim_after_completion = len(rows) < params["limit"]
        # Lapsed rows whose endpoint is paused come back 'failed' (deferred, not run).
        items = [ClaimedDelivery(*row) for row in rows if row[1] != Status.FAILED]
        decrypted: dict[str, str] = {}
        for item in items:
            item.decrypted = decrypted
        return items

    def any_due(self, conn: Any, params: dict[str, Any]) -> bool:
        if not self._selected(params):
            return False
        return bool(conn.execute(sql.ANY_DUE_DELIVERIES).fetchone()[0])

    def any_left(self, conn: Any, params: dict[str, Any]) -> bool:
        if not self._selected(params):
            return False
        return bool(conn.execute(sql.ANY_LEFT_DELIVERIES).fetchone()[0])

    def retries_due_now(self, conn: Any, params: dict[str, Any]) -> None:
        if self._selected(params):
            conn.execute(sql.DELIVERY_RETRIES_DUE_NOW)

    # -- sending ---------------------------------------------------------------------

    def _transport(self) -> WebhookTransport:
        conf = get_settings().WEBHOOKS
        local = self._local
        if local.transport is None or local.conf is not conf:
            if local.transport is not None:
                local.transport.close()
            local.transport = transport_from_settings(conf)
            local.conf = conf
        return local.transport

    @traced_delivery
    def run(self, item: ClaimedDelivery) -> Outcome:
        """Sign and POST one delivery; describe the outcome. Never raises."""
        started_at = timezone.now()
        started = time.perf_counter()
        body = item.body.encode()  # the bytes signed are the bytes sent
        try:
            secrets = item.secrets(started_at)
            timestamp = int(time.time())
            headers = build_headers(
                secrets=secrets,
                msg_id=item.msg_id,
                timestamp=timestamp,
                body=body,
                idempotency_key=delivery_idempotency_key(item.msg_id, item.id),
                custom_headers=outgoing_headers(item.headers or None),
            )
        except (SecretDecryptionError, ValueError, TypeError, KeyError) as exc:
            # Never send unsigned: a secret we cannot read fails the attempt loudly.
            # The messages name the problem, never a secret.
            logger.error("Delivery %s not sent: %s", item.id, exc)
            result = TransportResult(error=f"not sent: {exc}")
            local_error = True
        else:
            result = self._transport().post(item.url, body, headers)
            local_error = False
        if "after_http_response" in self.test_hooks:
            hooks.pause("after_http_response", item.id, item.token)
        outcome = self._outcome(item, result, started_at, local_error=local_error)
        outcome.duration = time.perf_counter() - started
        return outcome

    def _outcome(
        self,
        item: ClaimedDelivery,
        result: TransportResult,
        started_at: dt.datetime,
        *,
        local_error: bool = False,
    ) -> Outcome:
        conf = get_settings().WEBHOOKS
        # A refusal by our own settings is not the receiver's fault: the breaker is not
        # told (LOCAL_ERROR) and the retry waits at the breaker's pace.
        refused = breaker.refused_by_configuration(result)
        verdict = breaker.LOCAL_ERROR if local_error or refused else breaker.verdict(result)
        if verdict == breaker.SUCCESS:
            status, delay, last_error = Status.SUCCEEDED, 0.0, None
        else:
            delay_or_none = breaker.retry_delay(item.attempts, item.max_attempts, result, conf)
            if refused and delay_or_none is not None:
                delay_or_none = breaker.refusal_delay(item.attempts, delay_or_none, conf)
            status = Status.DEAD if delay_or_none is None else Status.FAILED
            delay = delay_or_none or 0.0
            last_error = storable_text(
                f"attempt {item.attempts}: {breaker.describe_failure(result)}", LAST_ERROR_CAP
            )
        body, cut = _body_text(result.body, conf["RESPONSE_CAP"])
        return Outcome(
            item.id,
            item.token,
            status,
            delay=delay,
            last_error=last_error,
            task_path=item.task_path,
            attempt=item.attempts,
            source=self.name,
            extra={
                "verdict": verdict,
                "started_at": started_at,
                "duration_ms": result.duration_ms,
                "status_code": result.status_code,
                # Whatever the receiver sent, escaped and bounded (storable.py): one
                # hostile header must not fail the batch of outcomes it is written in.
                "headers": storable_headers(result.headers),
                "body": body,
                "truncated": result.truncated or cut,
                "error": storable_text(result.log_text, LAST_ERROR_CAP),
            },
        )

    def release(self, item: ClaimedDelivery, reason: str) -> Outcome:
        return Outcome(
            item.id,
            item.token,
            Status.PENDING,
            refund=1,
            last_error=reason,
            task_path=item.task_path,
            attempt=item.attempts,
            source=self.name,
            extra={"verdict": breaker.NOT_SENT},
        )

    def interrupted(self, item: ClaimedDelivery) -> Outcome:
        result = TransportResult(
            error=f"interrupted: worker {self.worker_id} shut down during the request"
        )
        return self._outcome(item, result, timezone.now(), local_error=True)

    def crashed(self, item: ClaimedDelivery, exc: BaseException) -> Outcome:
        # A fresh result: the one the attempt got may be what made it fail.
        result = TransportResult(error=f"internal error: {describe_exception(exc)}")
        return self._outcome(item, result, timezone.now(), local_error=True)

    def describe(self, item: ClaimedDelivery) -> str:
        return item.task_path

    def unstorable(self, outcome: Outcome, reason: str, worker_id: str) -> Outcome:
        """The same verdict and status (the receiver did answer so), without the
        response's content, and ``reason`` as the attempt's error."""
        extra = outcome.extra
        code = extra.get("status_code")
        return dataclasses.replace(
            outcome,
            last_error=f"attempt {outcome.attempt}: {reason}",
            extra={
                **extra,
                "status_code": code if isinstance(code, int) and 100 <= code <= 999 else None,
                "duration_ms": min(max(int(extra.get("duration_ms") or 0), 0), 2**31 - 1),
                "headers": "{}",
                "body": "",
                "truncated": False,
                "error": reason,
            },
        )

    # -- writing ---------------------------------------------------------------------

    def write_outcomes(self, conn: Any, batch: list[Outcome]) -> set[int]:
        # Arrays go as PostgreSQL array literals (text, cast by the statement), as
        # JobSource does: psycopg's list dumper adapts element by element.
        extras = [o.extra for o in batch]
        started = [e.get("started_at") for e in extras]
        params = {
            "ids": array_literal([str(o.job_id) for o in batch]),
            "tokens": array_literal([str(o.token) for o in batch]),
            "statuses": array_literal([str(o.status) for o in batch]),
            "delays": array_literal([repr(float(o.delay)) for o in batch]),
            "last_errors": text_array_literal([o.last_error for o in batch]),
            "refunds": array_literal([str(int(o.refund)) for o in batch]),
            "attempts": array_literal([str(int(o.attempt)) for o in batch]),
            "started": text_array_literal([s.isoformat() if s else None for s in started]),
            "durations": array_literal([str(int(e.get("duration_ms", 0))) for e in extras]),
            "codes": array_literal([_literal(e.get("status_code")) for e in extras]),
            "headers": text_array_literal([e.get("headers", "{}") for e in extras]),
            "bodies": text_array_literal([e.get("body", "") for e in extras]),
            "truncated": array_literal(["true" if e.get("truncated") else "false" for e in extras]),
            "errors": text_array_literal([e.get("error", "") for e in extras]),
            "verdicts": array_literal([str(e["verdict"]) for e in extras]),
            "worker_id": self.worker_id,
            **breaker.breaker_params(get_settings().WEBHOOKS),
        }
        rows = _COMPLETE.fetchall(conn, params)
        changes = {(r[1], r[2], r[3]) for r in rows if r[2] is not None and r[2] != r[3]}
        for _endpoint, old, new in changes:
            for observer in breaker_observers:
                observer(old, new)
        operational.announce(
            opened={endpoint for endpoint, old, new in changes if new == "open" != old},
            disabled={r[1] for r in rows if r[5]},
            dead=[r[0] for r in rows if r[4] == "dead"],
        )
        return {row[0] for row in rows}
