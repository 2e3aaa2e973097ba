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

A database outage never discards an outcome that can still land: the guard of a
completion is the claim token, so a row nobody re-claimed takes its outcome however
late it comes. Outcomes that could not be written within COMPLETION_RETRY_SECONDS
are kept (``parked``), stay held (the lease keeper goes on extending them) and are
written again every PARKED_RETRY_SECONDS until they land or their row turns out to
belong to another claim. The worker claims nothing while outcomes are parked, so
its own claim cannot take a row whose outcome it still holds.
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

from ..conf import get_settings
from ..db import connect, describe_db_error, is_connection_error, is_data_error
from ..outcomes import Outcome
from ..rollup import store as rollup_store
from ..storable import make_outcome_storable
from . import hooks
from .heartbeat import Heartbeat
from .sources import Source

logger = logging.getLogger("django_pgqueue.worker")

#: Most outcomes written by one statement.
MAX_BATCH = 1000

#: How long a small batch waits for the outcomes of the other rows this process
#: holds, and below what size it waits. A completion costs its planning (0.6 ms for a
#: batch of deliveries, 0.2 ms for jobs), its execution's fixed part and a commit
#: whatever its size, and webhook deliveries, each a few hundred microseconds of HTTP
#: per thread, arrived at the completer a handful at a time: about eight per
#: statement. An outcome written up to this much later changes nothing else: its
#: row stays held, and its lease is extended as before.
LINGER_SECONDS = 0.003
LINGER_UNDER = 64

#: Seconds between two tries of outcomes kept through a database outage.
PARKED_RETRY_SECONDS = 0.5

#: Seconds between two samples of the queues' depth (the rollup keeps one a minute).
DEPTH_SAMPLE_SECONDS = 20.0

Key = tuple[str, int]

#: Put in the outcome queue by ``extend_now``: wakes the thread, carries no outcome.
_EXTEND_NOW: Any = object()


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
        #: Outcomes kept through a database outage, written again until they land.
        self.parked: list[Outcome] = []
        self._extend_soon = False
        self._parked_since = 0.0
        #: Set by the Worker: beats on this thread's cadence and connection.
        self.heartbeat: Heartbeat | None = None
        #: When to sample the queues' depth for the console's rollup next.
        self._next_depth_sample = 0.0

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

    def extend_now(self) -> None:
        """Extend the leases now rather than at the next ``lease / 3`` tick: the
        extension reads the abort flags, so an aborted job is given up at once."""
        self._extend_soon = True
        self.outcomes.put(_EXTEND_NOW)

    def run(self) -> None:
        interval = max(0.05, self.lease_seconds / 3.0)
        next_extend = time.monotonic() + interval
        stopping = False
        while not stopping:
            if self.heartbeat is not None:
                self.heartbeat.tick(self._connection, self._drop_connection)
            wake_at = next_extend
            if self.parked:
                wake_at = min(wake_at, time.monotonic() + PARKED_RETRY_SECONDS)
            timeout = max(0.0, wake_at - time.monotonic())
            batch, stopping = self._take(timeout)
            if batch:
                by_source: dict[str, list[Outcome]] = defaultdict(list)
                for outcome in batch:
                    by_source[outcome.source].append(outcome)
                # While outcomes are parked the database is known to be away: a new
                # batch gets one try, not a whole budget that would hold up the leases.
                budget = 0.0 if self.parked else None
                for name, outcomes in by_source.items():
                    self.write(self.sources[name], outcomes, budget=budget)
            if self._extend_soon or time.monotonic() >= next_extend:
                self._extend_soon = False
                self.extend_leases()
                next_extend = time.monotonic() + interval
            if time.monotonic() >= self._next_depth_sample:
                self.sample_depth()
            if self.parked:
                self.retry_parked(budget=0.0)
            if self.outcomes.empty() and not self.parked:
                self.idle.set()
        if self.parked:  # stopping: one more budget, then the leases take over
            self.retry_parked(budget=self.retry_budget)
            for outcome in self.parked:
                self._forget(outcome)
            if self.parked:
                logger.error(
                    "Database unreachable while stopping: %d outcome(s) not written; their "
                    "leases will lapse and the work will run again",
                    len(self.parked),
                )
            self.parked = []
        if self.heartbeat is not None:
            self.heartbeat.stop(self._connection)
        self._drop_connection()

    def _take(self, timeout: float) -> tuple[list[Outcome], bool]:
        """The next batch of outcomes (waiting up to ``timeout`` for the first), and
        whether a stop was asked.

        A batch smaller than LINGER_UNDER sleeps LINGER_SECONDS once and takes what
        came meanwhile, when this process holds more rows than the batch: their
        outcomes are on their way, and each completion statement costs a planning,
        an execution and a commit whatever its size. One sleep, not a wait per
        outcome: waking this thread for each would cost more than it saves.
        """
        batch: list[Outcome] = []
        try:
            item = self.outcomes.get(timeout=timeout)
        except queue.Empty:
            return batch, False
        lingered = False
        while True:
            if item is None:
                return batch, True
            if item is not _EXTEND_NOW:
                batch.append(item)
            if len(batch) >= MAX_BATCH:
                return batch, False
            try:
                item = self.outcomes.get_nowait()
                continue
            except queue.Empty:
                if lingered or not self._more_on_the_way(len(batch)):
                    return batch, False
            lingered = True
            time.sleep(LINGER_SECONDS)
            try:
                item = self.outcomes.get_nowait()
            except queue.Empty:
                return batch, False

    def _more_on_the_way(self, size: int) -> bool:
        """Whether a batch of ``size`` outcomes is worth LINGER_SECONDS: it is small,
        this process holds rows beyond it, and no lease extension or parked outcome
        is waiting for this thread."""
        return (
            0 < size < LINGER_UNDER
            and len(self.held) > size
            and not self._extend_soon
            and not self.parked
        )

    # -- completions ---------------------------------------------------------------

    def retry_parked(self, budget: float) -> None:
        """Write the outcomes kept through an outage again, retrying for ``budget`` s."""
        parked, self.parked = self.parked, []
        by_source: dict[str, list[Outcome]] = defaultdict(list)
        for outcome in parked:
            by_source[outcome.source].append(outcome)
        for name, outcomes in by_source.items():
            self.write(self.sources[name], outcomes, budget=budget, ambiguous=True)
        if parked and not self.parked:
            logger.warning(
                "Database reachable again after %.1f s: %d kept outcome(s) written or settled",
                time.monotonic() - self._parked_since,
                len(parked),
            )

    def write(
        self,
        source: Source,
        batch: list[Outcome],
        *,
        budget: float | None = None,
        ambiguous: bool = False,
    ) -> None:
        """Write ``batch``; retry on connection loss within the budget, then keep it.

        Outcomes still unwritten when the budget is spent are parked (see the module
        docstring), never discarded: a row is given up only when its token shows
        another claim owns it. ``ambiguous``: an earlier try may have committed.
        """
        if "before_complete" in self.test_hooks and not ambiguous:
            for outcome in batch:
                hooks.pause("before_complete", outcome.id, outcome.token)
        if not ambiguous:
            for outcome in batch:
                make_outcome_storable(outcome)
        deadline = time.monotonic() + (self.retry_budget if budget is None else budget)
        pending = batch
        written: set[int] = set()
        reclaimed: set[int] = set()
        failed: set[int] = set()
        kept: list[Outcome] = []
        delay = 0.1
        row_by_row = False
        while pending:
            try:
                conn = self._connection()
                if ambiguous:
                    pending, landed, others = self._settle_ambiguous(source, conn, pending)
                    written |= landed
                    reclaimed |= others
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
                    failed |= {o.id for o in pending}
                    break
                # The reply may have been lost after the server committed: check
                # what the rows hold before writing again.
                ambiguous = True
                self._drop_connection()
                if time.monotonic() + delay > deadline:
                    if not self.parked and budget is None:
                        self._parked_since = time.monotonic()
                        logger.error(
                            "Database unreachable: could not write %d outcome(s) within "
                            "%.1f s (%s); keeping them and their leases, retrying until "
                            "the database answers",
                            len(pending),
                            self.retry_budget,
                            exc,
                        )
                    kept = pending
                    break
                logger.warning("Completion write failed (%s); retrying in %.2f s", exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        self.parked.extend(kept)
        kept_ids = {o.id for o in kept}
        done = [o for o in batch if o.id not in kept_ids]
        for outcome in done:
            if outcome.id in written or outcome.key in self.lost or outcome.id in failed:
                continue
            how = (
                "re-claimed after its lease lapsed while the database was unreachable"
                if outcome.id in reclaimed
                else "its lease was lost (re-claimed after it lapsed)"
            )
            logger.warning(
                "%s %s: %s; another claim owns it now, so this outcome (%s) is discarded",
                source.name,
                outcome.id,
                how,
                outcome.status,
            )
        for outcome in done:
            self._forget(outcome)
        if done:
            self.on_written(done, {(source.name, i) for i in written})

    def _forget(self, outcome: Outcome) -> None:
        """The outcome is settled (written or given up): its row is no longer held."""
        with self.held_lock:
            if self.held.get(outcome.key) == outcome.token:
                del self.held[outcome.key]
            self.lost.discard(outcome.key)

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
    ) -> tuple[list[Outcome], set[int], set[int]]:
        """(still to write, already landed, re-claimed by another claim)."""
        state = source.read_outcomes(conn, [o.id for o in pending])
        still: list[Outcome] = []
        landed: set[int] = set()
        others: set[int] = set()
        for outcome in pending:
            status, token = state.get(outcome.id, (None, None))
            if token == outcome.token and status != "in_progress":
                landed.add(outcome.id)  # our write committed before the reply was lost
            elif token == outcome.token:
                still.append(outcome)
            else:
                others.add(outcome.id)  # re-claimed by someone else; nothing to write
        return still, landed, others

    # -- the console's rollup ------------------------------------------------------

    def sample_depth(self) -> None:
        """Sample the job queues' depth into the rollup's current minute (the first
        worker of each minute writes it; the others' tries are an index probe)."""
        self._next_depth_sample = time.monotonic() + DEPTH_SAMPLE_SECONDS
        if not get_settings().ROLLUP:
            return
        try:
            rollup_store.sample_depth(self._connection())
        except Exception as exc:
            if is_connection_error(exc):
                self._drop_connection()
            logger.warning("Rollup depth sample failed (%s); will retry", exc)

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
