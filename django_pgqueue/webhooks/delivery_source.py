"""Webhook deliveries as a worker source: claim, sign, POST, record.

The Worker's claim loop, task threads, completer and lease keeper run deliveries
exactly as they run jobs (``worker/sources.py``). This module supplies the HTTP
attempt and its :class:`DeliveryOutcome`; the claim (the circuit breaker's filter
and its single half-open probe) and the outcome write (the row, its attempt log
entry and the endpoint's breaker in one statement) are ``webhooks/store.py``'s.

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

from ..conf import get_settings
from ..models.queue import Status
from ..models.webhooks import delivery_idempotency_key
from ..notify import WAKE_DELIVERIES
from ..outcomes import DeliveryOutcome
from ..rollup import store as rollup_store
from ..storable import LAST_ERROR_CAP, storable_headers, storable_text
from ..stored_json import decode
from ..tracing import outgoing_headers, traced_delivery
from ..worker import hooks
from ..worker.runner import describe_exception
from ..worker.sources import Source
from . import breaker, operational, store
from .crypto import SecretDecryptionError, decrypt_active_secrets
from .envelope import envelope_body
from .redaction import redact_headers
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
    """A delivery as ``store.claim`` returned it (secrets still encrypted)."""

    id: int
    status: str
    token: uuid.UUID
    attempts: int
    max_attempts: int
    endpoint_id: int
    url: str
    secret_ciphertext: str
    # JSON text from the claim, decoded by the attempt (``stored_json.decode``): an
    # endpoint row Python cannot decode fails its deliveries' attempts, named.
    previous_secrets: list[dict[str, str]] | str
    headers: dict[str, str] | str
    msg_id: str
    event_type: str
    body: str
    #: When the event was created: the envelope's ``timestamp`` (webhooks/envelope.py).
    occurred_at: dt.datetime
    #: Decrypted secrets by ciphertext, shared by the deliveries of one claim: a batch
    #: to one endpoint decrypts its secret once. Lives as long as the batch's items.
    decrypted: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def __repr__(self) -> str:  # never the secrets
        return f"<ClaimedDelivery {self.id} {self.event_type} -> endpoint {self.endpoint_id}>"

    @property
    def task_path(self) -> str:
        return f"{self.event_type} -> endpoint {self.endpoint_id}"

    def secrets(self, now: dt.datetime) -> list[str]:
        """Every secret to sign with (current first); raises SecretDecryptionError, or
        StoredJSONNotDecodable for previous secrets Python cannot decode."""
        return decrypt_active_secrets(
            self.secret_ciphertext,
            decode(self.previous_secrets),
            now,
            what=f"the secrets of endpoint {self.endpoint_id}",
            cache=self.decrypted,
        )


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

    name = WAKE_DELIVERIES  # also the NOTIFY payload that wakes it (notify.py)

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
        rows = store.claim(conn, params, get_settings().WEBHOOKS["MAX_IN_FLIGHT"])
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
        return store.any_due(conn)

    def any_left(self, conn: Any, params: dict[str, Any]) -> bool:
        if not self._selected(params):
            return False
        return store.any_left(conn)

    def retries_due_now(self, conn: Any, params: dict[str, Any]) -> None:
        if self._selected(params):
            store.retries_due_now(conn)

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
    def run(self, item: ClaimedDelivery) -> DeliveryOutcome:
        """Sign and POST one delivery; describe the outcome. Never raises."""
        started_at = timezone.now()
        started = time.perf_counter()
        # The bytes signed are the bytes sent: the event's payload in its envelope.
        body = envelope_body(item.event_type, item.occurred_at, item.body)
        try:
            secrets = item.secrets(started_at)
            timestamp = int(time.time())
            headers = build_headers(
                secrets=secrets,
                msg_id=item.msg_id,
                timestamp=timestamp,
                body=body,
                idempotency_key=delivery_idempotency_key(item.msg_id, item.id),
                custom_headers=outgoing_headers(decode(item.headers) or None),
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
    ) -> DeliveryOutcome:
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
        return DeliveryOutcome(
            item.id,
            item.token,
            status,
            delay=delay,
            last_error=last_error,
            task_path=item.task_path,
            attempt=item.attempts,
            source=self.name,
            verdict=verdict,
            started_at=started_at,
            duration_ms=result.duration_ms,
            status_code=result.status_code,
            # Whatever the receiver sent, escaped and bounded (storable.py): one
            # hostile header must not fail the batch of outcomes it is written in.
            headers=storable_headers(result.headers),
            # Never a credential: redacted by the one declared rule (redaction.py).
            request_headers=storable_headers(
                redact_headers(result.request_headers, conf["REDACT_HEADERS"])
            ),
            body=body,
            truncated=result.truncated or cut,
            error=storable_text(result.log_text, LAST_ERROR_CAP),
            endpoint_id=item.endpoint_id,
        )

    def release(self, item: ClaimedDelivery, reason: str) -> DeliveryOutcome:
        return DeliveryOutcome(
            item.id,
            item.token,
            Status.PENDING,
            refund=1,
            last_error=reason,
            task_path=item.task_path,
            attempt=item.attempts,
            source=self.name,
            verdict=breaker.NOT_SENT,
        )

    def interrupted(self, item: ClaimedDelivery) -> DeliveryOutcome:
        result = TransportResult(
            error=f"interrupted: worker {self.worker_id} shut down during the request"
        )
        return self._outcome(item, result, timezone.now(), local_error=True)

    def crashed(self, item: ClaimedDelivery, exc: BaseException) -> DeliveryOutcome:
        # A fresh result: the one the attempt got may be what made it fail.
        result = TransportResult(error=f"internal error: {describe_exception(exc)}")
        return self._outcome(item, result, timezone.now(), local_error=True)

    def describe(self, item: ClaimedDelivery) -> str:
        return item.task_path

    def unstorable(self, outcome: DeliveryOutcome, reason: str, worker_id: str) -> DeliveryOutcome:
        """The same verdict and status (the receiver did answer so), without the
        response's content, and ``reason`` as the attempt's error."""
        code = outcome.status_code
        return dataclasses.replace(
            outcome,
            last_error=f"attempt {outcome.attempt}: {reason}",
            status_code=code if isinstance(code, int) and 100 <= code <= 999 else None,
            duration_ms=min(max(int(outcome.duration_ms or 0), 0), 2**31 - 1),
            headers="{}",
            request_headers="{}",
            body="",
            truncated=False,
            error=reason,
        )

    # -- writing ---------------------------------------------------------------------

    def read_outcomes(self, conn: Any, ids: list[int]) -> dict[int, tuple[str, uuid.UUID | None]]:
        return store.read_outcomes(conn, ids)

    def extend_leases(
        self, conn: Any, ids: list[int], tokens: list[uuid.UUID], lease: float
    ) -> set[int]:
        return store.extend_leases(conn, ids, tokens, lease)

    def write_outcomes(self, conn: Any, batch: list[DeliveryOutcome]) -> set[int]:
        """Complete the batch and count it into the console's rollup, in the one
        statement of the completion: the counts commit exactly when it does."""
        conf = get_settings().WEBHOOKS
        done = rollup_store.complete_counted_deliveries(
            conn, batch, lambda counts: store.complete(conn, batch, self.worker_id, conf, counts)
        )
        for _endpoint, old, new in done.circuits:
            for observer in breaker_observers:
                observer(old, new)
        operational.announce(
            opened={endpoint for endpoint, old, new in done.circuits if new == "open" != old},
            disabled=done.disabled,
            dead=done.dead,
        )
        return done.written
