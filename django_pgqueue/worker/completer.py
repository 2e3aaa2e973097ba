"""Writes outcomes in batches and keeps the leases of held rows alive.

One thread, one connection: completions and lease extensions never wait for a
free connection behind busy task threads (connection budget, see
docs/operations.md). Outcomes that arrive together are written with one
statement per source (its store's completion, e.g. ``jobs.store.complete``), each
row guarded by its claim token.

Outcomes are made storable first (``storable.py``). If a batch still fails on a
value it carries (a data error, not a lost connection), it is written again row by
row, so one bad row never sends innocent work round again; the bad row itself is
recorded with "outcome could not be stored: ..." (``Source.unstorable``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from ..db import connect, describe_db_error, is_connection_error, is_data_error
from ..outcomes import Outcome
from ..storable import make_outcome_storable
from . import hooks
from .heartbeat import Heartbeat
from .sources import Source

logger = logging.getLogger("django_pgqueue.worker")

#: Most outcomes written by one statement.
MAX_BATCH = 1000

Key = tuple[str, int]


class Completer(threading.Thread):
    """Drains ``outcomes``, writes them, and extends leases every ``lease / 3`` seconds."""

    def __init__(
        self,
        *,
        worker_id: str,
        sources: dict[str, Source],
        lease_seconds: float,
        retry_budget: float,
        held: dict[Key, uuid.UUID],
        held_lock: threading.Lock,
        on_written: Callable[[list[Outcome], set[Key]], None],
        test_hooks: frozenset[str],
    ) -> None:
        super().__init__(name="pgqueue-completer", daemon=True)
        self.worker_id = worker_id
        self.sources = sources
        self.lease_seconds = lease_seconds
        self.retry_budget = retry_budget
        self.outcomes: queue.SimpleQueue[Outcome | None] = queue.SimpleQueue()
        self.held = held
        self.held_lock = held_lock
        self.on_written = on_written
        self.test_hooks = test_hooks
        self.idle = threading.Event()
        self.idle.set()
        self._conn: Any = None
        self.lost: set[Key] = set()
        #: Set by the Worker: beats on this thread's cadence and connection.
        self.heartbeat: Heartbeat | None = None

    # -- connection ----------------------------------------------------------------

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = connect(f"complete-{self.worker_id}")
        return self._conn

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: S110 - already broken
                pass

    # -- main loop -----------------------------------------------------------------

    def submit(self, outcome: Outcome) -> None:
        if self.idle.is_set():  # clear() takes the event's lock: once per batch, not per job
            self.idle.clear()
        self.outcomes.put(outcome)

    def stop(self) -> None:
        """Flush what is queued, then end the thread."""
        self.outcomes.put(None)

    def run(self) -> None:
        interval = max(0.05, self.lease_seconds / 3.0)
        next_extend = time.monotonic() + interval
        stopping = False
        while not stopping:
            if self.heartbeat is not None:
                self.heartbeat.tick(self._connection, self._drop_connection)
            timeout = max(0.0, next_extend - time.monotonic())
            batch: list[Outcome] = []
            try:
                first = self.outcomes.get(timeout=timeout)
                if first is None:
                    stopping = True
                else:
                    batch.append(first)
                while len(batch) < MAX_BATCH and not stopping:
                    item = self.outcomes.get_nowait()
                    if item is None:
                        stopping = True
                        break
                    batch.append(item)
            except queue.Empty:
                pass
            if batch:
                by_source: dict[str, list[Outcome]] = defaultdict(list)
                for outcome in batch:
                    by_source[outcome.source].append(outcome)
                for name, outcomes in by_source.items():
                    self.write(self.sources[name], outcomes)
            if self.outcomes.empty():
                self.idle.set()
            if time.monotonic() >= next_extend:
                self.extend_leases()
                next_extend = time.monotonic() + interval
        if self.heartbeat is not None:
            self.heartbeat.stop(self._connection)
        self._drop_connection()

    # -- completions ---------------------------------------------------------------

    def write(self, source: Source, batch: list[Outcome]) -> None:
        """Write ``batch``; retry on connection loss within the budget, then give up.

        Giving up is safe: the rows stay ``in_progress`` until their lease lapses
        and another claim runs them again (at-least-once).
        """
        if "before_complete" in self.test_hooks:
            for outcome in batch:
                hooks.pause("before_complete", outcome.id, outcome.token)
        for outcome in batch:
            make_outcome_storable(outcome)
        deadline = time.monotonic() + self.retry_budget
        pending = batch
        written: set[int] = set()
        delay = 0.1
        ambiguous = False
        row_by_row = False
        while pending:
            try:
                conn = self._connection()
                if ambiguous:
                    pending, landed = self._settle_ambiguous(source, conn, pending)
                    written |= landed
                    ambiguous = False
                    if not pending:
                        break
                if row_by_row:
                    written |= self._write_row(source, conn, pending[0])
                    pending = pending[1:]
                    continue
                written |= source.write_outcomes(conn, pending)
                pending = []
            except Exception as exc:
                # Before is_connection_error: a program limit is an OperationalError.
                if is_data_error(exc) and not row_by_row and len(pending) > 1:
                    logger.warning(
                        "Completion write of %d outcome(s) refused a value (%s); writing "
                        "them one by one",
                        len(pending),
                        describe_db_error(exc),
                    )
                    row_by_row = True
                    continue
                if is_data_error(exc) and len(pending) == 1:
                    written |= self._write_unstorable(source, conn, pending[0], exc)
                    pending = pending[1:]
                    continue
                if not is_connection_error(exc):
                    logger.exception("Completion write failed; rows stay leased and will retry")
                    break
                # The reply may have been lost after the server committed: check
                # what the rows hold before writing again.
                ambiguous = True
                self._drop_connection()
                if time.monotonic() + delay > deadline:
                    logger.error(
                        "Could not write %d outcome(s) within %.1f s (%s); their leases "
                        "will lapse and the work will run again",
                        len(pending),
                        self.retry_budget,
                        exc,
                    )
                    break
                logger.warning("Completion write failed (%s); retrying in %.2f s", exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        for outcome in batch:
            if outcome.id not in written and outcome.key not in self.lost:
                logger.warning(
                    "%s %s: lease lost before the outcome (%s) was written; another worker "
                    "owns it now, so this result is discarded",
                    source.name,
                    outcome.id,
                    outcome.status,
                )
        with self.held_lock:
            for outcome in batch:
                if self.held.get(outcome.key) == outcome.token:
                    del self.held[outcome.key]
                self.lost.discard(outcome.key)
        self.on_written(batch, {(source.name, i) for i in written})

    def _write_row(self, source: Source, conn: Any, outcome: Outcome) -> set[int]:
        """One outcome alone; if its values are refused, its stand-in (a connection
        error propagates to ``write``'s retry loop)."""
        try:
            return source.write_outcomes(conn, [outcome])
        except Exception as exc:
            if not is_data_error(exc):
                raise
            return self._write_unstorable(source, conn, outcome, exc)

    def _write_unstorable(
        self, source: Source, conn: Any, outcome: Outcome, exc: BaseException
    ) -> set[int]:
        reason = f"outcome could not be stored: {describe_db_error(exc)}"
        logger.error("%s %s: %s", source.name, outcome.id, reason)
        stand_in = source.unstorable(outcome, reason, self.worker_id)
        make_outcome_storable(stand_in)
        try:
            return source.write_outcomes(conn, [stand_in])
        except Exception as again:
            if not is_data_error(again):
                raise
            logger.exception(
                "%s %s: even the stand-in outcome was refused; the row is left to its lease",
                source.name,
                outcome.id,
            )
            return set()

    @staticmethod
    def _settle_ambiguous(
        source: Source, conn: Any, pending: list[Outcome]
    ) -> tuple[list[Outcome], set[int]]:
        state = source.read_outcomes(conn, [o.id for o in pending])
        still: list[Outcome] = []
        landed: set[int] = set()
        for outcome in pending:
            status, token = state.get(outcome.id, (None, None))
            if token == outcome.token and status != "in_progress":
                landed.add(outcome.id)  # our write committed before the reply was lost
            elif token == outcome.token:
                still.append(outcome)
            # else: re-claimed by someone else; nothing to write.
        return still, landed

    # -- leases --------------------------------------------------------------------

    def extend_leases(self) -> None:
        """Extend every held lease; report the ones that were lost."""
        with self.held_lock:
            items = list(self.held.items())
        if not items:
            return
        by_source: dict[str, list[tuple[int, uuid.UUID]]] = defaultdict(list)
        for (name, job_id), token in items:
            by_source[name].append((job_id, token))
        for name, pairs in by_source.items():
            try:
                kept = self.sources[name].extend_leases(
                    self._connection(),
                    [i for i, _ in pairs],
                    [t for _, t in pairs],
                    self.lease_seconds,
                )
            except Exception as exc:
                if is_connection_error(exc):
                    self._drop_connection()
                logger.warning("Lease extension failed (%s); will retry", exc)
                continue
            for job_id, token in pairs:
                key = (name, job_id)
                if job_id in kept or key in self.lost:
                    continue
                # Lost only if this token is still the one held, and marked under the
                # lock: the worker drops a lost row it has not started (worker._handle),
                # so a newer claim of the same row must never be taken for it.
                with self.held_lock:
                    still_held = self.held.get(key) == token
                    if still_held:
                        self.lost.add(key)
                if still_held:
                    logger.warning(
                        "%s %s: lease lost (re-claimed after it lapsed); the running "
                        "attempt's result will be discarded",
                        name,
                        job_id,
                    )
