"""The relay: a worker source that hands a relay endpoint's events to its broker in
batches, in event order (the outbox pattern, with the delivery rows as the outbox).

A relay endpoint (``Endpoint.relay``) is a broker destination that consumers read the
fan-out from: the project sends its firehose to one relay endpoint, PostgreSQL keeps
one delivery row per event, and the broker (a RabbitMQ exchange's bindings, a
JetStream stream's consumers) fans it out. The relay differs from the deliveries'
source only in how it claims:

* one claimed *item* is a batch: a relay endpoint's oldest deliveries, up to
  ``RELAY_BATCH_SIZE``, sharing one claim token (``store.claim_relay``). One claim
  statement, one lease extension and one completion statement per batch instead of
  per delivery;
* one batch in flight per endpoint, across every worker (the claim locks the endpoint
  row and stops at the first delivery in flight), and the batch is published in id
  order on one thread: the broker receives the endpoint's events in event order, and
  so every ordering key's;
* the first delivery of a batch that fails ends the batch: the rest are given back
  unsent (their attempt refunded), so the failed one is retried before anything
  behind it.

Everything else is the deliveries': signing, the Standard Webhooks headers as message
headers, the ``webhook-id`` as message id (``Nats-Msg-Id``: JetStream de-duplicates a
resend), the attempt log, the breaker, retries, dead letters and replay, all written
by ``webhooks/store.py``. Delivery is at least once: a worker killed mid-batch leaves
its batch leased; when the lease lapses the deliveries' claim puts the rows back, and
the relay sends them again, first, with the same message ids.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from ..conf import get_settings
from ..models.queue import Status
from ..notify import WAKE_DELIVERIES
from ..outcomes import DeliveryOutcome, Outcome
from . import store
from .delivery_source import ClaimedDelivery, DeliverySource

#: Why the rest of a batch went back unsent.
HELD_BACK = "not sent: an earlier delivery of its relay batch failed (sent again in order)"


@dataclass(slots=True)
class RelayBatch:
    """One claimed batch: the worker holds it by its first delivery's id and the
    batch's token."""

    id: int
    token: uuid.UUID
    status: str
    endpoint_id: int
    items: list[ClaimedDelivery]

    @property
    def task_path(self) -> str:
        return f"relay batch of {len(self.items)} -> endpoint {self.endpoint_id}"


@dataclass(slots=True)
class BatchOutcome(Outcome):
    """What a batch came to: one delivery outcome per delivery of the batch."""

    outcomes: list[DeliveryOutcome] = field(default_factory=list)
    source: str = "relay"


class RelaySource(DeliverySource):
    """Relay endpoints' deliveries, claimed and sent in batches (``pgqueue_delivery``)."""

    name = "relay"
    #: A fan-out's NOTIFY names the deliveries it wrote, relayed ones among them.
    wakes_on = (WAKE_DELIVERIES,)
    # The endpoint's next batch can be claimed only once this one is written.
    claim_after_completion = True

    def __init__(self, worker_id: str) -> None:
        super().__init__(worker_id)
        # The ids and token of each held batch's deliveries, by batch id: the worker
        # extends and settles a batch by its first delivery's id alone.
        self._members: dict[int, list[int]] = {}
        self._members_lock = threading.Lock()

    # -- claiming --------------------------------------------------------------------

    def claim(self, conn: Any, params: dict[str, Any]) -> list[Any]:
        if not self._selected(params):
            return []
        conf = get_settings().WEBHOOKS
        rows = store.claim_relay(conn, params, conf["RELAY_BATCH_SIZE"])
        batches = []
        for endpoint_id, group in groupby(rows, key=lambda row: row[5]):
            items = [ClaimedDelivery(*row) for row in group]
            decrypted: dict[str, str] = {}
            for item in items:
                item.decrypted = decrypted  # one decryption of the secret per batch
            batch = RelayBatch(items[0].id, items[0].token, Status.IN_PROGRESS, endpoint_id, items)
            batches.append(batch)
            with self._members_lock:
                self._members[batch.id] = [item.id for item in items]
        return batches

    # -- sending ---------------------------------------------------------------------

    def run(self, item: RelayBatch) -> BatchOutcome:  # type: ignore[override]
        """Publish the batch in order, stopping at the first failure. Never raises."""
        outcomes: list[DeliveryOutcome] = []
        for position, delivery in enumerate(item.items):
            outcome = DeliverySource.run(self, delivery)
            outcomes.append(outcome)
            if outcome.status != Status.SUCCEEDED:
                outcomes += [
                    DeliverySource.release(self, d, HELD_BACK) for d in item.items[position + 1 :]
                ]
                break
        return self._batch(item, outcomes)

    def _batch(self, item: RelayBatch, outcomes: list[DeliveryOutcome]) -> BatchOutcome:
        failed = [o for o in outcomes if o.status != Status.SUCCEEDED and not o.refund]
        first = failed[0] if failed else outcomes[0]
        return BatchOutcome(
            item.id,
            item.token,
            first.status,
            last_error=first.last_error,
            task_path=item.task_path,
            attempt=first.attempt,
            duration=sum(o.duration for o in outcomes),
            source=self.name,
            outcomes=outcomes,
        )

    def release(self, item: RelayBatch, reason: str) -> BatchOutcome:  # type: ignore[override]
        return self._batch(item, [DeliverySource.release(self, d, reason) for d in item.items])

    def interrupted(self, item: RelayBatch) -> BatchOutcome:  # type: ignore[override]
        # Which of the batch went out is unknown: each is a failed attempt, sent again.
        return self._batch(item, [DeliverySource.interrupted(self, d) for d in item.items])

    def crashed(self, item: RelayBatch, exc: BaseException) -> BatchOutcome:  # type: ignore[override]
        return self._batch(item, [DeliverySource.crashed(self, d, exc) for d in item.items])

    def describe(self, item: RelayBatch) -> str:  # type: ignore[override]
        return item.task_path

    def unstorable(self, outcome: BatchOutcome, reason: str, worker_id: str) -> BatchOutcome:  # type: ignore[override]
        return dataclasses.replace(
            outcome,
            outcomes=[
                DeliverySource.unstorable(self, o, reason, worker_id) for o in outcome.outcomes
            ],
        )

    # -- writing ---------------------------------------------------------------------

    def extend_leases(
        self, conn: Any, ids: list[int], tokens: list[uuid.UUID], lease: float
    ) -> set[int]:
        with self._members_lock:
            members = {batch: self._members.get(batch, [batch]) for batch in ids}
        all_ids = [member for batch in ids for member in members[batch]]
        all_tokens = [
            token for batch, token in zip(ids, tokens, strict=True) for _ in members[batch]
        ]
        held = store.extend_leases(conn, all_ids, all_tokens, lease)
        return {batch for batch in ids if batch in held}

    def write_outcomes(self, conn: Any, batch: list[BatchOutcome]) -> set[int]:  # type: ignore[override]
        written = super().write_outcomes(conn, [o for b in batch for o in b.outcomes])
        with self._members_lock:
            for outcome in batch:
                self._members.pop(outcome.id, None)
        return {outcome.id for outcome in batch if outcome.id in written}
