"""The worker: claim loop, task threads, completer and listener of one process.

Shape of a process::

    main thread   claim loop: claims batches sized to free slots (sql.CLAIM_JOBS),
                  sleeps on NOTIFY or the poll interval
    N threads     run tasks (runner.TaskRunner), hand outcomes to the completer
    completer     writes outcomes in batches, extends leases (completer.py)
    listener      LISTEN connection, wakes the claim loop (listener.py)
    watchdog      replaces task threads that died or were given up (a timeout, an
                  abort) and records the attempts they held

Supervision: nothing a task or our own delivery code raises leaves a task thread
(it becomes a failed attempt with its error). A thread that dies anyway, or whose
attempt runs past its timeout or is aborted, is replaced within WATCH_INTERVAL;
its attempt is recorded (failed or cancelled) and its row leaves ``held``, so the
lease keeper stops extending it: if that record cannot be written either, the
row comes back through its lease. A given-up thread cannot be killed; it runs on
as a daemon and whatever its task returns is discarded.

Connections: one for claims, one for completions and leases, one for LISTEN,
plus whatever the tasks use (Django's per-thread connections).
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Sequence
from typing import Any

from django.db import connections

from ..conf import get_settings
from ..db import connect, is_connection_error
from ..exceptions import WorkerCrashed
from ..notify import abort_channel
from ..outcomes import Outcome
from ..queues import apply_settings
from ..scan_floor import ScanFloor
from ..tracing import traced_claim
from . import hooks
from .attempt import ABORTED, TIMED_OUT, Attempt, set_current
from .claim_state import PassResult, QuietSources, failure_delay
from .completer import PARKED_RETRY_SECONDS, Completer, Key
from .heartbeat import Heartbeat
from .listener import Listener
from .observers import attempt_log, attempt_written
from .runner import TaskRunner
from .signals import StopSignals
from .sources import JobSource, Source
from .supervisor import RECYCLE_EXIT_CODE

logger = logging.getLogger("django_pgqueue.worker")

#: Aim to hold about this many seconds of work beyond the running tasks
#: (adaptive prefetch): fast tasks get big batches, slow tasks small ones, so rows
#: are not parked behind a slow task while other workers sit idle.
PREFETCH_TARGET_SECONDS = 0.05

#: Seconds between two looks of the watchdog at the task threads.
WATCH_INTERVAL = 0.2

#: Frames of a timed-out task's stack kept in its error entry.
STACK_FRAMES = 30

#: An idle worker looks at the sources' upkeep (due once a second,
#: ``jobs.store.upkeep``) every UPKEEP_TICK seconds and does it UPKEEP_AHEAD seconds
#: before it falls due: it is done while idle, never by the claim a NOTIFY wakes.
UPKEEP_TICK = 0.25
UPKEEP_AHEAD = 0.5


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Worker:
    """Runs jobs until stopped (SIGTERM/SIGINT) or, with ``burst``, until idle.

    Every argument defaults to the ``PGQUEUE`` setting of the same name.
    """

    def __init__(
        self,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
        prefetch: int | None = None,
        batch_size: int | None = None,
        lease_seconds: float | None = None,
        poll_interval: float | None = None,
        burst: bool = False,
        max_tasks: int | None = None,
        worker_id: str | None = None,
        notify: bool | None = None,
        shutdown_grace: float | None = None,
        install_signal_handlers: bool = True,
        sources: Sequence[Source] | None = None,
        scheduler: bool | None = None,
        housekeeping: bool | None = None,
        until_empty: bool = False,
        max_time: float | None = None,
        recycle_overdue: bool = False,
        parent_pid: int | None = None,
    ) -> None:
        conf = get_settings()
        self.queues = list(queues or [])
        self.concurrency = concurrency or conf.CONCURRENCY
        # An explicit PREFETCH (setting or argument) is fixed; otherwise adaptive.
        self.fixed_prefetch = prefetch if prefetch is not None else conf.PREFETCH
        self.batch_size = batch_size or conf.BATCH_SIZE
        self.lease_seconds = lease_seconds or conf.LEASE_SECONDS
        self.poll_interval = poll_interval or conf.POLL_INTERVAL
        #: When the claim loop last came back with a short batch (_isolated_wake_up).
        self._short_batch_at = -1e9
        # ``until_empty`` is a burst run that also waits for scheduled retries and
        # deferred jobs; ``max_time`` bounds a run (exit code 2 when work is left).
        self.burst = burst or until_empty
        self.until_empty = until_empty
        self.max_time = max_time
        self.timed_out = False
        self.max_tasks = max_tasks
        self.worker_id = worker_id or default_worker_id()
        self.notify = conf.NOTIFY if notify is None else notify
        self.shutdown_grace = (
            conf.SHUTDOWN_GRACE_SECONDS if shutdown_grace is None else shutdown_grace
        )
        self.install_signal_handlers = install_signal_handlers
        # Under ``--processes``: a given-up thread still running SHUTDOWN_GRACE_SECONDS
        # after its deadline makes this process drain and exit for a fresh one.
        self.recycle_overdue = recycle_overdue
        self.recycle_requested = False
        self.test_hooks = hooks.armed_points()
        # Periodic tasks (periodic/scheduler.py); not in burst runs unless asked.
        self.run_scheduler = (not self.burst) if scheduler is None else scheduler
        self.scheduler_thread: threading.Thread | None = None
        # The maintenance thread (worker/housekeeping.py: history, partitions); not
        # in burst runs unless asked.
        self.run_housekeeping = (not self.burst) if housekeeping is None else housekeeping
        self.housekeeping_thread: threading.Thread | None = None

        self.stopping = threading.Event()
        self.wake = threading.Event()
        self.held: dict[Key, uuid.UUID] = {}
        self.held_lock = threading.Lock()
        # The attempt each task thread is running. Whoever pops a thread's entry
        # (the thread when its task returns, the watchdog when it gives the attempt
        # up) records the attempt's outcome; the other leaves it alone.
        self.running: dict[threading.Thread, Attempt] = {}
        # Rows whose abort an operator requested, with the claim token it applies to.
        self._aborts: dict[Key, uuid.UUID] = {}
        # Given-up threads still running: (thread, attempt, when it is overdue).
        self._abandoned: list[tuple[threading.Thread, Attempt, float]] = []
        self.replaced = 0  # task threads started to replace dead or given-up ones
        self._thread_seq = 0
        self._watch_stop = threading.Event()
        self._inflight = 0  # claimed and not yet finished running
        self._inflight_lock = threading.Lock()
        self._full = False  # the claim loop waits for _inflight <= _refill_at
        self._refill_at = 0
        # Sources whose last claim was short and whose rows just finished: their
        # claim may now find room that was not there (see Source.claim_after_completion).
        self._recheck: set[str] = set()
        self._todo: queue.SimpleQueue[tuple[Source, Any] | None] = queue.SimpleQueue()
        self._claim_conn: Any = None
        # Seconds between two task completions in this process (moving average):
        # the adaptive prefetch holds PREFETCH_TARGET_SECONDS of that throughput.
        self._avg_gap = 0.01
        self._last_done = time.perf_counter()
        self.claimed = 0
        self.finished = 0
        self.outcomes: dict[str, int] = {}
        # Under --processes: the supervisor's pid; its death makes this process drain.
        self.parent_pid = parent_pid
        if sources is None:
            sources = default_sources(self.worker_id)
        self.sources: list[Source] = list(sources)
        for source in self.sources:
            source.on_abort = self._abort_requested
        self.completer = Completer(
            worker_id=self.worker_id,
            sources={source.name: source for source in self.sources},
            lease_seconds=self.lease_seconds,
            retry_budget=conf.COMPLETION_RETRY_SECONDS,
            held=self.held,
            held_lock=self.held_lock,
            on_written=self._on_written,
            test_hooks=self.test_hooks,
        )
        self.completer.heartbeat = Heartbeat(
            self.worker_id, self.queues, self.concurrency, self.lease_seconds / 3.0
        )
        self.listener: Listener | None = None
        if self.notify:
            self.listener = Listener(
                channel=conf.NOTIFY_CHANNEL,
                also=[c for source in self.sources for c in getattr(source, "channels", ())],
                wake=self.wake,
                stopping=self.stopping,
                worker_id=self.worker_id,
                dsn=conf.LISTEN_DSN,
                health_interval=conf.LISTEN_HEALTH_INTERVAL,
                test_hooks=self.test_hooks,
                abort_channel=abort_channel(),
                on_abort=self.completer.extend_now,
            )
        self._threads: list[threading.Thread] = []
        self._watchdog = threading.Thread(target=self._watch, name="pgqueue-watchdog", daemon=True)

    # -- lifecycle -----------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped; returns the process exit code (0 after a clean stop)."""
        signals = StopSignals(
            self._on_stop_signal, self._on_second_stop_signal, name="pgqueue-signals"
        )
        if self.install_signal_handlers:
            signals.install()
        logger.info(
            "Worker %s starting: queues=%s concurrency=%d prefetch=%s lease=%.1fs poll=%.1fs "
            "notify=%s burst=%s",
            self.worker_id,
            ",".join(self.queues) or "*",
            self.concurrency,
            self.fixed_prefetch if self.fixed_prefetch is not None else "adaptive",
            self.lease_seconds,
            self.poll_interval,
            self.notify,
            self.burst,
            extra={
                "event": "worker_started",
                "worker_id": self.worker_id,
                "queues": self.queues,
                "concurrency": self.concurrency,
            },
        )
        _apply_queue_settings()
        self.completer.start()
        if self.listener is not None:
            self.listener.start()
        if self.run_scheduler:
            from ..periodic.scheduler import start_scheduler

            self.scheduler_thread = start_scheduler(self.stopping, self.worker_id)
        if self.run_housekeeping:
            from .housekeeping import start_housekeeping

            self.housekeeping_thread = start_housekeeping(
                self.stopping, get_settings().MAINTENANCE_INTERVAL
            )
        for _ in range(self.concurrency):
            self._start_thread()
        self._watchdog.start()
        try:
            self._claim_loop()
        finally:
            clean = self._shutdown()
            signals.restore()
        attempt_log().flush(logger, self.worker_id)
        if self.timed_out:
            return 2
        logger.info(
            "Worker %s stopped: %d claimed, %d finished %s",
            self.worker_id,
            self.claimed,
            self.finished,
            self.outcomes,
            extra={"event": "worker_stopped", "worker_id": self.worker_id},
        )
        if not clean:
            return 1
        return RECYCLE_EXIT_CODE if self.recycle_requested else 0

    def stop(self) -> None:
        """Stop claiming; running tasks finish within the grace period."""
        self.stopping.set()
        self.wake.set()

    def _on_stop_signal(self, signum: int) -> None:
        """The first SIGTERM/SIGINT drains (in the signal relay's thread, signals.py)."""
        logger.info(
            "Signal %s: no new claims; waiting up to %.0f s for running tasks",
            signal.Signals(signum).name,
            self.shutdown_grace,
        )
        self.stop()

    def _on_second_stop_signal(self, signum: int) -> None:
        """A second request, after the repeat window: exit now."""
        logger.warning("Second signal: exiting now; leases will recover held jobs")
        os._exit(1)

    # -- claiming ------------------------------------------------------------------

    def _capacity(self) -> tuple[int, int]:
        """(rows this process may hold, level at or below which it claims again).

        Refilling only once the prefetched rows are half used keeps claims
        batch-sized: topping up every freed slot would degrade to one-row claims
        (one statement and one commit per job) as soon as the prefetch is full.
        The adaptive prefetch may reach two batches so that a refill is a full one.
        """
        if self.fixed_prefetch is not None:
            prefetch = self.fixed_prefetch
        else:
            # From throughput, not from each task's wall time: under GIL contention a
            # no-op "takes" milliseconds, which shrank the prefetch, which made claims
            # smaller and contention worse (a drain could settle at a tenth of its rate).
            target = int(PREFETCH_TARGET_SECONDS / max(self._avg_gap, 1e-6))
            prefetch = max(1, min(2 * self.batch_size, target))
        return self.concurrency + prefetch, self.concurrency + prefetch // 2

    def _claim_loop(self) -> None:
        """Claim passes until stopped, out of time, at ``max_tasks`` or (burst) done."""
        params: dict[str, Any] = {
            "all_queues": not self.queues,
            "queues": self.queues,
            "lease": self.lease_seconds,
            "worker_id": self.worker_id,
            # Where the claims start reading their indexes (scan_floor.py): the plain
            # job claims and the message queues' consumer reads.
            "scan_floor": ScanFloor(),
        }
        quiet = QuietSources(self.poll_interval, self.sources)
        failures = 0
        deadline = None if self.max_time is None else time.monotonic() + self.max_time
        while not self.stopping.is_set():
            if deadline is not None and time.monotonic() > deadline:
                self.timed_out = True
                logger.error(
                    "Worker %s: --max-time %.0f s reached with work left; stopping",
                    self.worker_id,
                    self.max_time,
                )
                return
            if self.max_tasks is not None and self.claimed >= self.max_tasks:
                self._wait_until_idle()
                return
            if self.completer.parked:
                # Outcomes kept through a database outage are not written yet: a claim
                # now could take their own rows back (their leases lapsed meanwhile).
                self.wake.wait(PARKED_RETRY_SECONDS)
                continue
            self.wake.clear()
            heard = self.listener.take_heard() if self.listener is not None else set()
            quiet.refresh(heard, self._recheck)
            try:
                result = self._claim_pass(params, quiet)
            except Exception as exc:
                failures += 1
                self._claim_failed(exc, failure_delay(failures))
                continue
            failures = 0
            if result is PassResult.FULL:
                self.wake.wait(self.poll_interval)  # a task thread frees a slot
            elif result is PassResult.EMPTY and not self._wait_for_work(params, quiet):
                return  # a burst run whose work is done
            elif result is PassResult.SHORT_BATCH and self._isolated_wake_up():
                self._wait_for_work(params, quiet)
            # FULL_BATCH, and SHORT_BATCH in a stream of work: claim again at once.

    def _claim_pass(self, params: dict[str, Any], quiet: QuietSources) -> PassResult:
        """Claim from each source that is not quiet, while slots are free."""
        full = full_batch = claimed_any = False
        for source in self.sources:
            if quiet.skip(source.name):
                continue
            with self._inflight_lock:
                capacity, refill_at = self._capacity()
                free = capacity - self._inflight
                # Decided from what was read here: a task thread may clear ``_full``
                # as soon as the lock is free, while ``free`` stays what it was (below
                # zero when the adaptive prefetch just shrank under the rows held).
                full = self._full = free <= 0 or self._inflight > refill_at
                self._refill_at = refill_at
            if full:
                break
            limit = min(free, self.batch_size)
            if self.max_tasks is not None:
                limit = min(limit, self.max_tasks - self.claimed)
                if limit <= 0:
                    break
            items = self._claim(source, params, limit)
            if items:
                claimed_any = True
                self._dispatch(source, items)
            quiet.claimed(source.name, len(items))
            if len(items) == limit:
                full_batch = True
        return PassResult.of(full=full, full_batch=full_batch, claimed_any=claimed_any)

    def _claim_failed(self, exc: Exception, delay: float) -> None:
        """Log a failed pass, drop the claim connection and back off ``delay`` seconds."""
        if is_connection_error(exc):
            logger.warning("Claim failed (%s); reconnecting in %.1f s", exc, delay)
        else:
            logger.exception("Claim failed; retrying in %.1f s", delay)
        self._drop_claim_connection()
        self.stopping.wait(delay)

    def _wait_for_work(self, params: dict[str, Any], quiet: QuietSources) -> bool:
        """Sleep after an empty pass; False when a burst run has nothing left to do."""
        if not self.burst:
            self._idle_wait(params)
            return True
        if self._is_idle():
            if not self._anything_due(params):
                if not (self.until_empty and self._anything_left(params)):
                    return False
                # A retry or deferred job is waiting for its time.
                self.wake.wait(self.poll_interval)
                return True
            quiet.clear()  # something is due: ask every source again
        # Burst runs end as soon as the work does: re-check often.
        self.wake.wait(min(self.poll_interval, 0.05))
        return True

    def _isolated_wake_up(self) -> bool:
        """After a short batch: whether to wait for a NOTIFY rather than claim again.

        Every row committed after the claim's snapshot comes with a NOTIFY, which
        sets ``wake`` (at once if it came during the claim). For a wake-up on its
        own, a second claim would find nothing, at a claim's cost per job, and
        hold the GIL while the rows' task threads start. In a stream of work (the
        last short batch came less than two NOTIFY windows ago) it claims again at
        once: the producers coalesce their NOTIFYs (``NOTIFY_COALESCE_SECONDS``), so
        a row committed during the claim would otherwise wait for its window's.
        Not in burst runs, nor without a LISTEN connection.
        """
        now = time.monotonic()
        last, self._short_batch_at = self._short_batch_at, now
        if self.burst or self.listener is None or not self.listener.connected.is_set():
            return False
        return now - last >= 2 * get_settings().NOTIFY_COALESCE_SECONDS

    def _idle_wait(self, params: dict[str, Any]) -> None:
        """Wait up to a poll interval for ``wake``, doing the sources' upkeep before it
        falls due (UPKEEP_TICK, UPKEEP_AHEAD), so that it is never due in the claim
        a NOTIFY wakes, whatever the poll interval."""
        deadline = time.monotonic() + self.poll_interval
        while True:
            self._upkeep(params)
            left = deadline - time.monotonic()
            if left <= 0 or self.wake.wait(min(left, UPKEEP_TICK)):
                return

    def _upkeep(self, params: dict[str, Any]) -> None:
        """The sources' periodic claim work (``Source.upkeep``), when due, before an
        idle wait: the claim a NOTIFY wakes then does not pay for it. Only on an open
        claim connection: after a failure the next claim reconnects, with its
        back-off, and runs the same work when due. A failure is logged once."""
        conn = self._claim_conn
        if conn is None or conn.closed:
            return
        try:
            for source in self.sources:
                items = source.upkeep(conn, {**params, "limit": self.batch_size}, UPKEEP_AHEAD)
                if items:
                    self._dispatch(source, items)
        except Exception as exc:
            logger.warning("Claim upkeep failed (%s); the next claim retries it", exc)
            self._drop_claim_connection()

    @traced_claim
    def _claim(self, source: Source, params: dict[str, Any], limit: int) -> list[Any]:
        conn = self._claim_connection()
        params["limit"] = limit
        if "inside_claim_tx" in self.test_hooks:
            # Test-only: hold the claim open in an explicit transaction so a test
            # can kill the session while it is in flight.
            with conn.transaction():
                items = source.claim(conn, params)
                hooks.pause("inside_claim_tx", *[item.id for item in items])
            return items
        return source.claim(conn, params)

    def _claim_connection(self) -> Any:
        if self._claim_conn is None or self._claim_conn.closed:
            self._claim_conn = connect(f"worker-{self.worker_id}")
        return self._claim_conn

    def _drop_claim_connection(self) -> None:
        conn, self._claim_conn = self._claim_conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: S110 - already broken
                pass

    def _anything_due(self, params: dict[str, Any]) -> bool:
        try:
            conn = self._claim_connection()
            return any(source.any_due(conn, params) for source in self.sources)
        except Exception as exc:
            logger.warning("Idle check failed (%s)", exc)
            self._drop_claim_connection()
            return True

    def _anything_left(self, params: dict[str, Any]) -> bool:
        try:
            conn = self._claim_connection()
            return any(source.any_left(conn, params) for source in self.sources)
        except Exception as exc:
            logger.warning("Idle check failed (%s)", exc)
            self._drop_claim_connection()
            return True

    def _dispatch(self, source: Source, items: list[Any]) -> None:
        runnable = []
        for item in items:
            if item.status == "dead":
                logger.warning(
                    "%s %s (%s): lease lapsed on its last attempt; moved to the "
                    "dead-letter queue without running it again",
                    source.name,
                    item.id,
                    source.describe(item),
                )
                self._count("dead")
                continue
            if item.status == "cancelled":  # lapsed after an operator's abort
                logger.warning(
                    "%s %s (%s): lease lapsed after an abort; cancelled without running it again",
                    source.name,
                    item.id,
                    source.describe(item),
                )
                self._count("cancelled")
                continue
            runnable.append(item)
        with self.held_lock:
            for item in runnable:
                key = (source.name, item.id)
                self.held[key] = item.token
                # A row this worker lost and has now claimed again is held anew.
                self.completer.lost.discard(key)
        with self._inflight_lock:
            self._inflight += len(runnable)
        self.claimed += len(items)
        if "after_claim" in self.test_hooks:
            for item in runnable:
                hooks.pause("after_claim", item.id, item.token)
        for item in runnable:
            self._todo.put((source, item))

    # -- running -------------------------------------------------------------------

    def _start_thread(self) -> None:
        thread = threading.Thread(
            target=self._executor, name=f"pgqueue-task-{self._thread_seq}", daemon=True
        )
        self._thread_seq += 1
        self._threads.append(thread)
        thread.start()

    def _executor(self) -> None:
        me = threading.current_thread()
        try:
            while True:
                entry = self._todo.get()
                if entry is None:
                    return
                if not self._handle(me, *entry):
                    return  # given up: the watchdog recorded the attempt and replaced us
        except BaseException:
            # Only our own code can get here (a source's run is supervised in
            # _handle). The thread ends; the watchdog replaces it and settles its row.
            logger.critical("Task thread %s failed outside any task", me.name, exc_info=True)
        finally:
            connections.close_all()

    def _handle(self, me: threading.Thread, source: Source, item: Any) -> bool:
        """Run (or release) one row and hand its outcome to the completer.

        False when the watchdog gave the attempt up meanwhile: its outcome is
        recorded already, and this thread is no longer one of the worker's.
        """
        key = (source.name, item.id)
        if self.stopping.is_set():
            outcome = source.release(item, "Released by a worker shutting down")
        elif self._aborts and self._aborts.get(key) == item.token:
            del self._aborts[key]
            outcome = source.aborted(item, started=False)
        elif self._no_longer_ours(key, item.token):
            self._drop_unstarted(source, item)
            return True
        else:
            attempt = Attempt(source, item)
            self.running[me] = attempt
            set_current(attempt)
            try:
                if "before_task" in self.test_hooks:
                    hooks.pause("before_task", item.id, item.token)
                outcome = source.run(item)
            except BaseException as exc:  # a source's run must not raise; this one did
                logger.error(
                    "%s %s (%s): %s escaped the run; recorded as a failed attempt",
                    source.name,
                    item.id,
                    source.describe(item),
                    type(exc).__name__,
                    exc_info=True,
                )
                outcome = source.crashed(item, exc)
            finally:
                set_current(None)
            if self.running.pop(me, None) is not attempt:
                if attempt.given_up == TIMED_OUT and source.timeout_settled_by_thread:
                    # Its slot came back at the deadline; its row waited for this.
                    logger.warning(
                        "%s %s (%s) returned %.1f s after its timeout; recording what it came to",
                        source.name,
                        item.id,
                        source.describe(item),
                        time.monotonic() - attempt.started,
                    )
                    outcome.source = source.name
                    self.completer.submit(outcome)
                    return False
                logger.warning(
                    "%s %s (%s) returned %.1f s after it was given up (%s); its result "
                    "is discarded",
                    source.name,
                    item.id,
                    source.describe(item),
                    time.monotonic() - attempt.started,
                    attempt.given_up or "given up",
                )
                return False
            now = time.perf_counter()
            gap = min(now - self._last_done, 1.0)  # an idle spell counts 1 s at most
            self._last_done = now
            self._avg_gap = 0.9 * self._avg_gap + 0.1 * gap
            if "after_task" in self.test_hooks:
                hooks.pause("after_task", item.id, item.token)
        outcome.source = source.name
        self.completer.submit(outcome)
        self._slot_freed()
        return True

    def _no_longer_ours(self, key: Key, token: uuid.UUID) -> bool:
        """Whether a claimed row that has not started is no longer this claim's: the
        lease keeper found its lease lost (it lapsed while the row waited in the
        prefetch, and another claim took it), or this worker claimed it again since.
        Two dict lookups, no query: the answer comes from the lease keeper's last pass.
        """
        return self.held.get(key) != token or key in self.completer.lost

    def _drop_unstarted(self, source: Source, item: Any) -> None:
        """Let go of a row that is no longer ours without running it: its new owner
        runs it, and its attempt is on record (the new claim's LeaseExpired entry names
        this worker). Running it here would run the job twice, with a result that no
        completion could store."""
        key = (source.name, item.id)
        logger.warning(
            "%s %s (%s): its lease was lost while it waited to start; dropped unrun, its "
            "new owner runs it",
            source.name,
            item.id,
            source.describe(item),
        )
        with self.held_lock:
            if self.held.get(key) == item.token:
                del self.held[key]
                self.completer.lost.discard(key)
        self._count("lease_lost")
        self._slot_freed()

    def _slot_freed(self) -> None:
        with self._inflight_lock:
            self._inflight -= 1
            if self._full and self._inflight <= self._refill_at:
                self._full = False
                self.wake.set()

    # -- supervision -----------------------------------------------------------------

    def _abort_requested(self, source_name: str, ids: list[int]) -> None:
        """The lease keeper saw abort requests for held rows (completer thread)."""
        with self.held_lock:
            for job_id in ids:
                key = (source_name, job_id)
                token = self.held.get(key)
                if token is not None and self._aborts.get(key) != token:
                    self._aborts[key] = token
                    logger.info("%s %s: abort requested by an operator", source_name, job_id)

    def _watch(self) -> None:
        while not self._watch_stop.wait(WATCH_INTERVAL):
            if self.parent_pid is not None and os.getppid() != self.parent_pid:
                logger.error(
                    "Supervisor (pid %d) gone: draining this worker process", self.parent_pid
                )
                self.parent_pid = None  # reported once
                self.stop()
            try:
                self._check_threads()
            except Exception:
                logger.exception("Watchdog check failed; looking again in %.1f s", WATCH_INTERVAL)

    def _check_threads(self) -> None:
        """Replace dead task threads; give up attempts past their deadline or aborted."""
        for thread in list(self._threads):
            if not thread.is_alive():
                self._threads.remove(thread)
                logger.error("Task thread %s died; starting a replacement", thread.name)
                attempt = self.running.pop(thread, None)
                if attempt is not None:
                    exc = WorkerCrashed(f"task thread {thread.name} died while running it")
                    self._record(attempt, lambda a, e=exc: a.source.crashed(a.item, e))
                self._replace()
        now = time.monotonic()
        for thread, attempt in list(self.running.items()):
            key = (attempt.source.name, attempt.item.id)
            if attempt.deadline is not None and now >= attempt.deadline:
                reason = TIMED_OUT
            elif self._aborts and self._aborts.get(key) == attempt.item.token:
                reason = ABORTED
            else:
                continue
            # Set before the pop: the thread, finding its entry gone, reads the reason.
            attempt.given_up = reason
            if self.running.pop(thread, None) is not attempt:
                attempt.given_up = None
                continue  # it returned meanwhile: its own outcome stands
            attempt.abandoned = True
            if thread in self._threads:
                self._threads.remove(thread)
            self._abandoned.append((thread, attempt, now + self.shutdown_grace))
            if reason == TIMED_OUT and attempt.source.timeout_settled_by_thread:
                logger.error(
                    "%s %s (%s) ran past its timeout of %g s: its thread is replaced; "
                    "the row stays held until the task returns",
                    attempt.source.name,
                    attempt.item.id,
                    attempt.source.describe(attempt.item),
                    attempt.timeout,
                )
                self._slot_freed()
            elif reason == TIMED_OUT:
                stack = _stack_of(thread)
                logger.error(
                    "%s %s (%s) ran past its timeout of %g s: recorded as timed out; its "
                    "thread is abandoned and replaced",
                    attempt.source.name,
                    attempt.item.id,
                    attempt.source.describe(attempt.item),
                    attempt.timeout,
                )
                self._record(attempt, lambda a, s=stack: a.source.timed_out(a.item, a.timeout, s))
            else:
                logger.warning(
                    "%s %s (%s) aborted by an operator: recorded as cancelled; its thread "
                    "is abandoned and replaced",
                    attempt.source.name,
                    attempt.item.id,
                    attempt.source.describe(attempt.item),
                )
                self._record(attempt, lambda a: a.source.aborted(a.item))
            self._replace()
        self._check_abandoned(now)
        if self._aborts:
            for key in list(self._aborts):
                if key not in self.held:
                    self._aborts.pop(key, None)

    def _check_abandoned(self, now: float) -> None:
        """Forget given-up threads that ended; act on those overdue past the grace."""
        for entry in list(self._abandoned):
            thread, attempt, overdue_at = entry
            if not thread.is_alive():
                self._abandoned.remove(entry)
                continue
            if now < overdue_at:
                continue
            self._abandoned.remove(entry)  # reported once
            if self.recycle_overdue:
                logger.error(
                    "Task thread %s still runs %s %s %.0f s after it was given up: this "
                    "process drains and exits so that its supervisor starts a fresh one",
                    thread.name,
                    attempt.source.name,
                    attempt.item.id,
                    self.shutdown_grace,
                )
                self.recycle_requested = True
                self.stop()
            else:
                logger.error(
                    "Task thread %s still runs %s %s %.0f s after it was given up; it "
                    "holds no lease and no slot, but it holds memory until its task returns",
                    thread.name,
                    attempt.source.name,
                    attempt.item.id,
                    self.shutdown_grace,
                )

    def _record(self, attempt: Attempt, describe: Any) -> None:
        """Record a given-up attempt with ``describe(attempt)``'s outcome and free its slot.

        The row leaves ``held`` at once, so its lease is no longer extended: if the
        outcome cannot be written (or cannot even be built), the row comes back
        through its lease instead of staying held by a thread that is not running it.
        """
        source, item = attempt.source, attempt.item
        key = (source.name, item.id)
        self._aborts.pop(key, None)
        try:
            outcome = describe(attempt)
        except BaseException:
            logger.exception(
                "%s %s: could not describe the given-up attempt; its lease will lapse",
                source.name,
                item.id,
            )
        else:
            outcome.source = source.name
            outcome.duration = time.monotonic() - attempt.started
            self.completer.submit(outcome)
        with self.held_lock:
            if self.held.get(key) == item.token:
                del self.held[key]
        self._slot_freed()

    def _replace(self) -> None:
        self.replaced += 1
        self._start_thread()

    def _on_written(self, batch: list[Outcome], written: set[Key]) -> None:
        for source in self.sources:
            if source.claim_after_completion and any(o.source == source.name for o in batch):
                self._recheck.add(source.name)
                self.wake.set()
        for outcome in batch:
            if outcome.key not in written:
                self._count("lease_lost")
                continue
            self.finished += 1
            label = "released" if outcome.refund else str(outcome.status)
            self._count(label)
            attempt_written(self.worker_id, outcome, label)

    def _count(self, label: str) -> None:
        self.outcomes[label] = self.outcomes.get(label, 0) + 1

    def _is_idle(self) -> bool:
        with self._inflight_lock:
            if self._inflight:
                return False
        return self.completer.idle.is_set() and not self.held

    def _wait_until_idle(self) -> None:
        while not self._is_idle() and not self.stopping.is_set():
            time.sleep(0.01)

    # -- shutdown ------------------------------------------------------------------

    def _shutdown(self) -> bool:
        """Release unstarted rows, wait for running ones, flush outcomes. True if clean."""
        self.stopping.set()
        self._watch_stop.set()
        if self._watchdog.is_alive():
            self._watchdog.join(5)
        deadline = time.monotonic() + self.shutdown_grace
        for _ in self._threads:
            self._todo.put(None)  # after any queued jobs, which are released
        clean = True
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = list(self.running.values())
        if stuck:
            logger.warning(
                "Grace period over with %d task(s) still running: recording them as "
                "interrupted so they are retried now",
                len(stuck),
            )
            for attempt in stuck:
                source, item = attempt.source, attempt.item
                outcome = source.interrupted(item)
                outcome.source = source.name
                self.completer.submit(outcome)
        self.completer.stop()
        self.completer.join(get_settings().COMPLETION_RETRY_SECONDS + 5)
        if self.completer.is_alive():
            clean = False
        if self.listener is not None:
            self.listener.join(2)
        if self.scheduler_thread is not None:
            self.scheduler_thread.join(5)
        self._drop_claim_connection()
        return clean


def _stack_of(thread: threading.Thread) -> str:
    """Where ``thread`` is now (its innermost frames), for a timed-out attempt's record."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return ""
    return "".join(traceback.format_stack(frame, limit=STACK_FRAMES))


def default_sources(worker_id: str) -> list[Source]:
    """Jobs, atomic jobs, webhook deliveries, relay batches and registered consumers' queues."""
    from ..mq.source import message_sources
    from ..webhooks.delivery_source import DeliverySource
    from ..webhooks.relay_source import RelaySource
    from .atomic import AtomicJobSource

    conf = get_settings()
    return [
        JobSource(TaskRunner(worker_id, conf.UNKNOWN_TASK_DELAY)),
        AtomicJobSource(worker_id),
        DeliverySource(worker_id),
        RelaySource(worker_id),
        *message_sources(worker_id, conf.LEASE_SECONDS),
    ]


def _apply_queue_settings() -> None:
    """Apply ``PGQUEUE["QUEUES"]`` to the queue rows as the worker starts (a deploy
    restarts the workers, so it carries a change of the settings). A failure is
    logged and the worker runs on the rows as they are: it is no reason to stop
    running jobs."""
    connection = connections[get_settings().DATABASE]
    try:
        written, removed = apply_settings()
    except Exception:
        logger.exception("Could not apply PGQUEUE['QUEUES']; the queues keep their limits")
        return
    finally:
        # The worker's own connections do the rest; this thread's Django one is done
        # (unless a caller's transaction holds it).
        if not connection.in_atomic_block:
            connection.close()
    if written or removed:
        logger.info(
            "Applied PGQUEUE['QUEUES']: %d queue(s) configured, %d no longer limited",
            written,
            removed,
            extra={"event": "queue_settings_applied"},
        )
