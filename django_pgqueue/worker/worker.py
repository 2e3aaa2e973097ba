"""The worker: claim loop, task threads, completer and listener of one process.

Shape of a process::

    main thread   claim loop: claims batches sized to free slots (sql.CLAIM_JOBS),
                  sleeps on NOTIFY or the poll interval
    N threads     run tasks (runner.TaskRunner), hand outcomes to the completer
    completer     writes outcomes in batches, extends leases (completer.py)
    listener      LISTEN connection, wakes the claim loop (listener.py)

Connections: one for claims, one for completions and leases, one for LISTEN,
plus whatever the tasks use (Django's per-thread connections).
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from django.db import connections

from .. import sql
from ..conf import get_settings
from ..db import connect, is_connection_error
from . import hooks
from .completer import Completer
from .listener import Listener
from .runner import ClaimedJob, Outcome, TaskRunner

logger = logging.getLogger("django_pgqueue.worker")

#: Aim to hold about this many seconds of work per thread beyond the running
#: tasks (adaptive prefetch): fast tasks get big batches, slow tasks small ones,
#: so rows are not parked behind a slow task while other workers sit idle.
PREFETCH_TARGET_SECONDS = 0.05


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
    ) -> None:
        conf = get_settings()
        self.queues = list(queues or [])
        self.concurrency = concurrency or conf.CONCURRENCY
        # An explicit PREFETCH (setting or argument) is fixed; otherwise adaptive.
        self.fixed_prefetch = prefetch if prefetch is not None else conf.PREFETCH
        self.batch_size = batch_size or conf.BATCH_SIZE
        self.lease_seconds = lease_seconds or conf.LEASE_SECONDS
        self.poll_interval = poll_interval or conf.POLL_INTERVAL
        self.burst = burst
        self.max_tasks = max_tasks
        self.worker_id = worker_id or default_worker_id()
        self.notify = conf.NOTIFY if notify is None else notify
        self.shutdown_grace = (
            conf.SHUTDOWN_GRACE_SECONDS if shutdown_grace is None else shutdown_grace
        )
        self.install_signal_handlers = install_signal_handlers
        self.test_hooks = hooks._active_points()

        self.stopping = threading.Event()
        self.wake = threading.Event()
        self.held: dict[int, uuid.UUID] = {}
        self.held_lock = threading.Lock()
        self.running: dict[int, ClaimedJob] = {}
        self._inflight = 0  # claimed and not yet finished running
        self._inflight_lock = threading.Lock()
        self._full = False
        self._todo: queue.SimpleQueue[ClaimedJob | None] = queue.SimpleQueue()
        self._claim_conn: Any = None
        self._avg_task_seconds = 0.01
        self.claimed = 0
        self.finished = 0
        self.outcomes: dict[str, int] = {}
        self._signals = 0
        self.runner = TaskRunner(self.worker_id, conf.UNKNOWN_TASK_DELAY)
        self.completer = Completer(
            worker_id=self.worker_id,
            lease_seconds=self.lease_seconds,
            retry_budget=conf.COMPLETION_RETRY_SECONDS,
            held=self.held,
            held_lock=self.held_lock,
            on_written=self._on_written,
            test_hooks=self.test_hooks,
        )
        self.listener: Listener | None = None
        if self.notify:
            self.listener = Listener(
                channel=conf.NOTIFY_CHANNEL,
                wake=self.wake,
                stopping=self.stopping,
                worker_id=self.worker_id,
                dsn=conf.LISTEN_DSN,
                health_interval=conf.LISTEN_HEALTH_INTERVAL,
                test_hooks=self.test_hooks,
            )
        self._threads: list[threading.Thread] = []

    # -- lifecycle -----------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped; returns the process exit code (0 after a clean stop)."""
        old_handlers = self._install_signals()
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
        )
        self.completer.start()
        if self.listener is not None:
            self.listener.start()
        for i in range(self.concurrency):
            thread = threading.Thread(
                target=self._executor, name=f"pgqueue-task-{i}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        try:
            self._claim_loop()
        finally:
            clean = self._shutdown()
            self._restore_signals(old_handlers)
        logger.info(
            "Worker %s stopped: %d claimed, %d finished %s",
            self.worker_id,
            self.claimed,
            self.finished,
            self.outcomes,
        )
        return 0 if clean else 1

    def stop(self) -> None:
        """Stop claiming; running tasks finish within the grace period."""
        self.stopping.set()
        self.wake.set()

    def _install_signals(self) -> dict[int, Any]:
        if not self.install_signal_handlers or threading.current_thread() is not threading.main_thread():
            return {}
        old = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            old[sig] = signal.signal(sig, self._on_signal)
        return old

    @staticmethod
    def _restore_signals(old: dict[int, Any]) -> None:
        for sig, handler in old.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._signals += 1
        if self._signals > 1:
            logger.warning("Second signal: exiting now; leases will recover held jobs")
            os._exit(1)
        logger.info(
            "Signal %s: no new claims; waiting up to %.0f s for running tasks",
            signal.Signals(signum).name,
            self.shutdown_grace,
        )
        self.stop()

    # -- claiming ------------------------------------------------------------------

    def _capacity(self) -> int:
        if self.fixed_prefetch is not None:
            prefetch = self.fixed_prefetch
        else:
            per_thread = int(PREFETCH_TARGET_SECONDS / max(self._avg_task_seconds, 1e-6))
            prefetch = max(1, min(self.batch_size, per_thread * self.concurrency))
        return self.concurrency + prefetch

    def _claim_loop(self) -> None:
        params: dict[str, Any] = {
            "all_queues": not self.queues,
            "queues": self.queues,
            "lease": self.lease_seconds,
            "worker_id": self.worker_id,
        }
        failures = 0
        while not self.stopping.is_set():
            if self.max_tasks is not None and self.claimed >= self.max_tasks:
                self._wait_until_idle()
                break
            with self._inflight_lock:
                free = self._capacity() - self._inflight
                self._full = free <= 0
            if free <= 0:
                self.wake.wait(self.poll_interval)
                self.wake.clear()
                continue
            limit = min(free, self.batch_size)
            if self.max_tasks is not None:
                limit = min(limit, self.max_tasks - self.claimed)
            self.wake.clear()
            try:
                rows = self._claim(params, limit)
                failures = 0
            except Exception as exc:
                failures += 1
                delay = min(10.0, 0.2 * 2 ** min(failures, 6))
                if is_connection_error(exc):
                    logger.warning("Claim failed (%s); reconnecting in %.1f s", exc, delay)
                else:
                    logger.exception("Claim failed; retrying in %.1f s", delay)
                self._drop_claim_connection()
                self.stopping.wait(delay)
                continue
            if rows:
                self._dispatch(rows)
            if len(rows) == limit:
                continue  # a full batch: more may be due right now
            if self.burst and not rows and self._is_idle() and not self._anything_due(params):
                break
            self.wake.wait(self.poll_interval)

    def _claim(self, params: dict[str, Any], limit: int) -> list[ClaimedJob]:
        conn = self._claim_connection()
        params["limit"] = limit
        if "inside_claim_tx" in self.test_hooks:
            # Test-only: hold the claim open in an explicit transaction so a test
            # can kill the session while it is in flight.
            with conn.transaction():
                rows = conn.execute(sql.CLAIM_JOBS, params).fetchall()
                hooks.pause("inside_claim_tx", *[r[0] for r in rows])
        else:
            rows = conn.execute(sql.CLAIM_JOBS, params).fetchall()
        return [ClaimedJob.from_row(r) for r in rows]

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
            return bool(self._claim_connection().execute(sql.ANY_DUE, params).fetchone()[0])
        except Exception as exc:
            logger.warning("Idle check failed (%s)", exc)
            self._drop_claim_connection()
            return True

    def _dispatch(self, jobs: list[ClaimedJob]) -> None:
        runnable = []
        for job in jobs:
            if job.status == "dead":
                logger.warning(
                    "Job %s (%s): lease lapsed on its last attempt (%d of %d); moved to "
                    "the dead-letter queue without running it again",
                    job.id,
                    job.task_path,
                    job.attempts,
                    job.max_attempts,
                )
                self._count("dead")
                continue
            runnable.append(job)
        with self.held_lock:
            for job in runnable:
                self.held[job.id] = job.token
        with self._inflight_lock:
            self._inflight += len(runnable)
        self.claimed += len(jobs)
        if "after_claim" in self.test_hooks:
            for job in runnable:
                hooks.pause("after_claim", job.id, job.token)
        for job in runnable:
            self._todo.put(job)

    # -- running -------------------------------------------------------------------

    def _executor(self) -> None:
        try:
            while True:
                job = self._todo.get()
                if job is None:
                    return
                if self.stopping.is_set():
                    outcome = self.runner.release(job, "Released by a worker shutting down")
                else:
                    self.running[job.id] = job
                    if "before_task" in self.test_hooks:
                        hooks.pause("before_task", job.id, job.token)
                    outcome = self.runner.run(job)
                    self.running.pop(job.id, None)
                    self._avg_task_seconds = 0.9 * self._avg_task_seconds + 0.1 * outcome.duration
                    if "after_task" in self.test_hooks:
                        hooks.pause("after_task", job.id, job.token)
                self.completer.submit(outcome)
                with self._inflight_lock:
                    self._inflight -= 1
                    if self._full:
                        self._full = False
                        self.wake.set()
        finally:
            connections.close_all()

    def _on_written(self, batch: list[Outcome], written: set[int]) -> None:
        for outcome in batch:
            if outcome.job_id not in written:
                self._count("lease_lost")
                continue
            self.finished += 1
            label = "released" if outcome.refund else str(outcome.status)
            self._count(label)
            if logger.isEnabledFor(logging.INFO):
                logger.info(
                    "Job %s %s attempt=%d duration=%.3fs outcome=%s",
                    outcome.job_id,
                    outcome.task_path,
                    outcome.attempt,
                    outcome.duration,
                    label,
                )

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
        deadline = time.monotonic() + self.shutdown_grace
        for _ in self._threads:
            self._todo.put(None)  # after any queued jobs, which are released
        clean = True
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [job for job in list(self.running.values())]
        if stuck:
            logger.warning(
                "Grace period over with %d task(s) still running: recording them as "
                "interrupted so they are retried now",
                len(stuck),
            )
            for job in stuck:
                self.completer.submit(self.runner.interrupted(job))
        self.completer.stop()
        self.completer.join(get_settings().COMPLETION_RETRY_SECONDS + 5)
        if self.completer.is_alive():
            clean = False
        if self.listener is not None:
            self.listener.join(2)
        self._drop_claim_connection()
        return clean

