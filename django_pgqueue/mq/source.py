"""The worker side of ``@mq.consumer``: message queues as a worker Source.

A read is the claim: ``mq.read`` with the consumer's visibility timeout (at least
the worker's ``LEASE_SECONDS``, so the lease keeper extends it in time), then the
handler runs on a task thread and the completer archives or deletes the message.
Every read and write goes through ``store.py`` (its worker functions); this module
runs no SQL of its own. A message Python cannot decode never reaches a handler and
never fails the claim: ``store.claim`` quarantines it and hands over the others.
The fencing token of a read is its ``read_ct``: any later read of the message
increments it, so every write for a handled message (archive, delete, extend,
release) is guarded by ``read_ct`` and a worker that lost the message (killed,
stalled past its timeout) can never archive the new reader's copy. A worker
killed with ``kill -9`` leaves its messages hidden until their timeout lapses;
then any worker reads them again (at-least-once), and with ``max_reads`` a message
that keeps killing its consumer ends up as a dead letter.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import close_old_connections

from ..logs import repeat_note, repeated_failures
from ..outcomes import MessageOutcome
from ..worker.attempt import current_attempt
from ..worker.runner import describe_exception
from ..worker.sources import Source
from . import sql, store
from .consumers import Consumer, consumers
from .exceptions import QueueNotFound

logger = logging.getLogger("django_pgqueue.worker")

#: Seconds a consumer whose queue does not exist is left alone before asking again.
MISSING_QUEUE_RETRY_SECONDS = 30.0

_ids = itertools.count(1)


@dataclass
class ClaimedMessage:
    """A message read for a consumer (the worker's Claimed protocol)."""

    consumer: Consumer
    message: store.Message
    id: int = field(default_factory=lambda: next(_ids))
    token: uuid.UUID = field(default_factory=uuid.uuid4)
    status: str = "in_progress"
    started: float = field(default_factory=time.monotonic)

    @property
    def task_path(self) -> str:
        return self.consumer.path


class MessageSource(Source):
    """Every registered consumer's queue, read in turn by one worker."""

    name = "messages"

    def __init__(self, worker_id: str, registered: dict[str, Consumer], lease: float) -> None:
        self.worker_id = worker_id
        self.consumers = list(registered.values())
        self.lease = lease
        self._held: dict[int, ClaimedMessage] = {}
        self._lock = threading.Lock()
        self._missing: dict[str, float] = {}
        self._turn = 0

    @property
    def channels(self) -> list[str]:
        """NOTIFY channels of the consumed queues (the worker's listener LISTENs on them)."""
        return [sql.channel(c.queue) for c in self.consumers]

    # -- claiming --------------------------------------------------------------------

    def _selected(self, params: dict[str, Any]) -> list[Consumer]:
        chosen = [
            c
            for c in self.consumers
            if (params.get("all_queues", True) or c.queue in params.get("queues", ()))
            and self._missing.get(c.queue, 0.0) <= time.monotonic()
        ]
        # Start from a different consumer each time, so one busy queue cannot
        # starve the others of the claim's capacity.
        self._turn = (self._turn + 1) % max(1, len(chosen))
        return chosen[self._turn :] + chosen[: self._turn]

    def _info(self, conn: Any, consumer: Consumer) -> store.QueueInfo | None:
        try:
            return store.get_queue(consumer.queue, conn=conn)
        except QueueNotFound:
            logger.warning(
                "Consumer %s: message queue %r does not exist (create it with mq.create); "
                "asking again in %.0f s",
                consumer.path,
                consumer.queue,
                MISSING_QUEUE_RETRY_SECONDS,
            )
            self._missing[consumer.queue] = time.monotonic() + MISSING_QUEUE_RETRY_SECONDS
            return None

    def claim(self, conn: Any, params: dict[str, Any]) -> list[ClaimedMessage]:
        limit = params["limit"]
        items: list[ClaimedMessage] = []
        for consumer in self._selected(params):
            if len(items) >= limit:
                break
            info = self._info(conn, consumer)
            if info is None:
                continue
            vt = max(consumer.vt, params.get("lease", self.lease))
            qty = min(consumer.batch, limit - len(items))
            try:
                read = store.claim(conn, info, vt, qty, params.get("scan_floor"))
            except QueueNotFound:  # dropped meanwhile
                continue
            items.extend(ClaimedMessage(consumer, message) for message in read)
        with self._lock:
            for item in items:
                self._held[item.id] = item
        return items

    def any_due(self, conn: Any, params: dict[str, Any]) -> bool:
        for consumer in self._selected(params):
            if self._info(conn, consumer) is None:
                continue
            if store.any_visible(conn, consumer.queue):
                return True
        return False

    # -- running ---------------------------------------------------------------------

    def _outcome(
        self,
        item: ClaimedMessage,
        status: str,
        action: str,
        delay: float,
        error: BaseException | None = None,
    ) -> MessageOutcome:
        return MessageOutcome(
            id=item.id,
            token=item.token,
            status=status,
            delay=delay,
            last_error=None if error is None else describe_exception(error),
            task_path=item.task_path,
            attempt=item.message.read_ct,
            row_id=item.message.msg_id,
            action=action,
        )

    def run(self, item: ClaimedMessage) -> MessageOutcome:
        """Run the consumer's handler on one message; never raises."""
        close_old_connections()
        attempt = current_attempt()
        if attempt is not None and item.consumer.time_limit is not None:
            # The worker's supervision gives up on the handler at its time limit and
            # replaces the thread, as it does for a task's timeout.
            attempt.set_timeout(item.consumer.time_limit)
        started = time.perf_counter()
        try:
            item.consumer.handler(item.message)
        except Exception as exc:
            # A WARNING: the message comes back. A handler failing the same way on
            # every read (its service is down) prints its traceback once.
            seen = repeated_failures.seen(item.task_path, f"{type(exc).__name__}: {exc}")
            logger.warning(
                "Consumer %s failed on message %s of %r (read %d times): %s%s",
                item.task_path,
                item.message.msg_id,
                item.consumer.queue,
                item.message.read_ct,
                exc,
                repeat_note(seen) if seen else f"\n{traceback.format_exc()}",
            )
            # Not acknowledged: visible again after the visibility timeout, as in pgmq.
            outcome = self._outcome(item, "failed", "retry", item.consumer.vt, exc)
        else:
            action = "delete" if item.consumer.delete else "archive"
            outcome = self._outcome(item, "succeeded", action, 0.0)
        finally:
            close_old_connections()
        outcome.duration = time.perf_counter() - started
        return outcome

    def crashed(self, item: ClaimedMessage, exc: BaseException) -> MessageOutcome:
        # What escaped the handler (SystemExit and the like), its time limit or a dead
        # thread: not acknowledged, so visible again after the visibility timeout.
        logger.error(
            "Consumer %s ended on message %s of %r by %s: %s",
            item.task_path,
            item.message.msg_id,
            item.consumer.queue,
            type(exc).__name__,
            exc,
        )
        return self._outcome(item, "failed", "retry", item.consumer.vt, exc)

    def release(self, item: ClaimedMessage, reason: str) -> MessageOutcome:
        # Never started: visible at once and the read is not counted.
        return self._outcome(item, "released", "release", 0.0)

    def interrupted(self, item: ClaimedMessage) -> MessageOutcome:
        # Cut off by shutdown: visible at once; the read counts (it did run).
        return self._outcome(item, "interrupted", "retry", 0.0)

    # -- writing ---------------------------------------------------------------------

    def _by_queue(self, ids: list[int]) -> dict[str, list[ClaimedMessage]]:
        grouped: dict[str, list[ClaimedMessage]] = {}
        with self._lock:
            for i in ids:
                item = self._held.get(i)
                if item is not None:
                    grouped.setdefault(item.consumer.queue, []).append(item)
        return grouped

    def write_outcomes(self, conn: Any, batch: list[MessageOutcome]) -> set[int]:
        outcomes = {o.id: o for o in batch}
        written: set[int] = set()
        for queue, items in self._by_queue(list(outcomes)).items():
            by_msg = {item.message.msg_id: item.id for item in items}
            settled = store.settle(
                conn,
                queue,
                [
                    (
                        item.message.msg_id,
                        item.message.read_ct,
                        outcomes[item.id].action,
                        outcomes[item.id].delay,
                    )
                    for item in items
                ],
            )
            written |= {by_msg[msg_id] for msg_id in settled}
        with self._lock:
            for i in outcomes:
                self._held.pop(i, None)
        return written

    def read_outcomes(self, conn: Any, ids: list[int]) -> dict[int, tuple[str, uuid.UUID | None]]:
        """After an ambiguous write: still ours and unsettled, settled, or re-read."""
        state: dict[int, tuple[str, uuid.UUID | None]] = {}
        for queue, items in self._by_queue(ids).items():
            counts = store.read_counts(conn, queue, [item.message.msg_id for item in items])
            for item in items:
                count = counts.get(item.message.msg_id)
                if count is None:
                    state[item.id] = ("done", item.token)  # archived or deleted: ours landed
                elif count == item.message.read_ct:
                    state[item.id] = ("in_progress", item.token)
                else:
                    state[item.id] = ("in_progress", None)  # read again by someone else
        return state

    def extend_leases(
        self, conn: Any, ids: list[int], tokens: list[uuid.UUID], lease: float
    ) -> set[int]:
        kept: set[int] = set()
        now = time.monotonic()
        for queue, items in self._by_queue(ids).items():
            limit = items[0].consumer.time_limit
            if limit is not None:
                # Past its time limit a handler no longer holds its message: the
                # visibility timeout lapses and another read gets it.
                items = [item for item in items if now - item.started <= limit]
            if not items:
                continue
            vt = max(items[0].consumer.vt, lease)
            by_msg = {item.message.msg_id: item.id for item in items}
            held = [(item.message.msg_id, item.message.read_ct) for item in items]
            kept |= {by_msg[msg_id] for msg_id in store.extend(conn, queue, held, vt)}
        return kept

    def describe(self, item: Any) -> str:
        return f"{item.consumer.path} on {item.consumer.queue!r}"


def message_sources(worker_id: str, lease: float) -> list[Source]:
    """A MessageSource when consumers are registered in this process, else nothing."""
    registered = consumers()
    return [MessageSource(worker_id, registered, lease)] if registered else []
