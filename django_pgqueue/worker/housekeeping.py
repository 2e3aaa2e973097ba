"""The workers' maintenance thread: every worker process runs one, none leads.

Every ``PGQUEUE["MAINTENANCE_INTERVAL"]`` seconds (the first pass a few seconds
after start) it runs :func:`django_pgqueue.history.maintain` on its own autocommit
connection: the premade history partitions, the mover of finished jobs and, when
configured, retention by partitions. Each step takes a transaction-level advisory
lock, so with many workers one does the work and the others skip it; a worker
killed in the middle leaves nothing half done (each batch is one statement).

The same thread samples the message queues into the console's rollup
(``rollup.store.sample_message_queues``) every ``MQ_SAMPLE_SECONDS``, whatever the
maintenance interval: the first worker in a minute writes it, the others' tries are
an index probe, so the message queues' own statements never pay for their charts.

A failed pass or sample is logged and tried again at the next interval; it never
stops the worker, and a lost connection is replaced.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from typing import Any

from .. import history
from ..conf import get_settings
from ..db import connect, is_connection_error
from ..maintenance import retention_plan
from ..mq import partitions as mq_partitions
from ..rollup import store as rollup_store

logger = logging.getLogger("django_pgqueue.worker")

#: The first pass waits up to this long after start (spread, so a fleet restarting
#: together does not pass at once).
FIRST_PASS_SECONDS = 2.0

#: Seconds between two tries of the message queues' sample (the rollup keeps one a
#: minute; three tries a minute leave no minute unsampled while a worker runs).
MQ_SAMPLE_SECONDS = 20.0


class HousekeepingThread(threading.Thread):
    """Runs the maintenance pass every ``interval`` seconds until ``stopping``."""

    def __init__(self, stopping: threading.Event, interval: float) -> None:
        super().__init__(name="pgqueue-maintenance", daemon=True)
        self.stopping = stopping
        self.interval = interval
        self.passes = 0
        self._conn: Any = None

    def run(self) -> None:
        wait = random.uniform(0.0, min(FIRST_PASS_SECONDS, self.interval))
        next_pass = time.monotonic() + wait
        try:
            while not self.stopping.wait(wait):
                if time.monotonic() >= next_pass:
                    self._pass()
                    next_pass = time.monotonic() + self.interval
                self._sample()
                wait = max(0.0, min(MQ_SAMPLE_SECONDS, next_pass - time.monotonic()))
        finally:
            self._close()

    def _connection(self) -> Any:
        if self._conn is None:
            self._conn = connect("maintenance")
        return self._conn

    def _sample(self) -> None:
        """The message queues' minute for the console's charts, unless a worker wrote it."""
        if not get_settings().ROLLUP:
            return
        try:
            rollup_store.sample_message_queues(self._connection())
        except Exception as exc:
            logger.warning("Message queue sample failed (%s); will retry", exc)
            if is_connection_error(exc) or getattr(self._conn, "closed", False):
                self._close()

    def _pass(self) -> None:
        try:
            self._connection()
            conf = get_settings()
            retention = retention_plan() if conf.MAINTENANCE_RETENTION else None
            report = history.maintain(
                self._conn,
                retention=retention,
                attempt_retention=(
                    conf.ATTEMPT_RETENTION_SECONDS if conf.MAINTENANCE_RETENTION else None
                ),
                stopping=self.stopping.is_set,
            )
            archives = mq_partitions.maintain(
                self._conn,
                retention=conf.MAINTENANCE_RETENTION and report.locked,
                stopping=self.stopping.is_set,
            )
            self.passes += 1
            dropped = len(archives.dropped) + sum(
                len(d.dropped) for d in (report.dropped, report.attempts_dropped) if d is not None
            )
            made = report.partitions_made + archives.partitions_made
            if report.moved.moved or made or dropped:
                logger.info(
                    "Maintenance: %d finished jobs moved to history in %d batches, %d "
                    "partitions made, %d dropped (%.2f s)",
                    report.moved.moved,
                    report.moved.batches,
                    made,
                    dropped,
                    report.seconds,
                )
        except Exception as exc:
            logger.warning("Maintenance pass failed (%s); retrying in %.1f s", exc, self.interval)
            if is_connection_error(exc) or getattr(self._conn, "closed", False):
                self._close()

    def _close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # closing a broken connection
                self._conn.close()
            self._conn = None


def start_housekeeping(stopping: threading.Event, interval: float) -> HousekeepingThread:
    """Start this process's maintenance thread."""
    thread = HousekeepingThread(stopping, interval)
    thread.start()
    return thread
