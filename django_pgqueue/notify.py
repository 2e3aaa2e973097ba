"""Wake idle workers after a commit: ``transaction.on_commit`` -> coalesced NOTIFY.

NOTIFY is an optimisation only. Workers also poll, so a NOTIFY that is lost,
late or fails costs latency, never a job. Every commit that carries a NOTIFY
takes a global lock in PostgreSQL, so a process sends at most one per channel
per ``NOTIFY_COALESCE_SECONDS`` window, with a trailing edge so the last job of
a burst is not left waiting for the poll.

The NOTIFY goes out on a small background thread with its own connection: the
enqueueing request never pays a round trip for it, and a failing NOTIFY can
never fail an enqueue.

The payload names the worker source the work is for (:data:`WAKE_JOBS`,
:data:`WAKE_ATOMIC`, :data:`WAKE_DELIVERIES`): a worker asks only that source
again, and leaves the ones that came back empty quiet until their poll. An empty
payload (:data:`WAKE_ALL`: ``pg_notify`` from SQL, an operator's retry, an older
release) wakes every source. Requests are coalesced per channel and payload.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from typing import TYPE_CHECKING

from django.db import connections

from . import sql
from .conf import get_settings

if TYPE_CHECKING:
    import psycopg

logger = logging.getLogger("django_pgqueue.notify")

#: NOTIFY payloads: the name of the worker source that has new work
#: (``Source.name``), or :data:`WAKE_ALL` for every source.
WAKE_ALL = ""
WAKE_JOBS = "jobs"
WAKE_ATOMIC = "atomic"
WAKE_DELIVERIES = "deliveries"


class Notifier:
    """Per-process coalescing NOTIFY sender (one daemon thread, one connection)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._sending = False
        #: (channel, payload) pairs waiting for their window.
        self._pending: set[tuple[str, str]] = set()
        self._event = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._conn: psycopg.Connection | None = None
        self.sent = 0

    def request(self, channel: str, payload: str = WAKE_ALL) -> None:
        """Ask for one NOTIFY on ``channel`` with ``payload`` soon (cheap; never raises)."""
        key = (channel, payload)
        thread = self._thread
        if key in self._pending and thread is not None and thread.is_alive():
            # Waiting for its window: the NOTIFY that goes out is sent after this
            # call, hence after the caller's commit, and wakes workers for it too.
            # (A forked child inherits the set and the attribute, not the thread.)
            return
        with self._lock:
            if self._pid != os.getpid():  # forked: the thread did not survive
                self._thread, self._conn, self._pid = None, None, os.getpid()
            self._pending.add(key)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="pgqueue-notifier", daemon=True
                )
                self._thread.start()
        self._event.set()

    def _run(self) -> None:
        while True:
            self._event.wait()
            self._event.clear()
            with self._lock:
                channels, self._pending = self._pending, set()
                self._sending = True
            try:
                for channel, payload in channels:
                    self._send(channel, payload)
            finally:
                with self._lock:
                    self._sending = False
                    self._idle.notify_all()
            # Requests arriving during the window set the event again and are
            # sent right after it: the trailing edge.
            window = get_settings().NOTIFY_COALESCE_SECONDS
            if window:
                time.sleep(window)

    def _send(self, channel: str, payload: str, attempts: int = 2) -> None:
        from .db import connect

        for attempt in range(1, attempts + 1):
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = connect("notify", prepare=False)
                self._conn.execute(sql.NOTIFY, (channel, payload))
                self.sent += 1
                return
            except Exception as exc:  # a NOTIFY must never break anything
                self._close()
                if attempt == attempts:
                    logger.warning("NOTIFY on %r failed (workers will poll): %s", channel, exc)

    def flush(self, timeout: float = 5.0) -> None:
        """Send any NOTIFY still waiting for its window, now (called at exit).

        A process that enqueues and exits at once (a management command, a
        script) would otherwise take its trailing NOTIFY with it, and idle
        workers would only find the jobs at their next poll. A NOTIFY the
        thread is sending right now is waited for (up to ``timeout``): the
        thread is a daemon, stopped mid-send when the interpreter exits.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            if self._pid != os.getpid():
                return
            while self._sending and time.monotonic() < deadline:
                self._idle.wait(0.05)
            channels, self._pending = self._pending, set()
        for channel, payload in channels:
            self._send(channel, payload, attempts=1)
        with self._lock:
            self._close()

    def close(self, timeout: float = 5.0) -> None:
        """Close the notifier's connection once requested NOTIFYs went out.

        It reconnects on the next request. Waiting (up to ``timeout``) for the
        sender to be idle means no send can open a new connection right after.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            while (self._pending or self._sending) and time.monotonic() < deadline:
                self._idle.wait(0.05)
            self._close()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: S110 - already broken
                pass


notifier = Notifier()
atexit.register(notifier.flush)


def abort_channel() -> str:
    """The channel that tells workers an operator aborted a running job (``abort()``):
    they then extend their leases at once, which reads the abort flags."""
    return f"{get_settings().NOTIFY_CHANNEL}_abort"[:63]


def wake_workers(
    alias: str | None = None, channel: str | None = None, payload: str = WAKE_ALL
) -> None:
    """Schedule a NOTIFY for idle workers after the current transaction commits.

    Outside a transaction it is sent at once (after the implicit commit). ``channel``
    defaults to ``NOTIFY_CHANNEL`` (work is due); see also :func:`abort_channel`.
    ``payload`` names the source the work is for (``WAKE_*``; default: every source).
    """
    conf = get_settings()
    if not conf.NOTIFY:
        return
    channel = channel or conf.NOTIFY_CHANNEL
    connection = connections[alias or conf.DATABASE]
    if connection.in_atomic_block:
        connection.on_commit(lambda: notifier.request(channel, payload))
    elif connection.get_autocommit():
        # Committed already (each enqueue of a ``for`` loop outside ``atomic``):
        # what ``on_commit`` would do, without building a callback per call.
        notifier.request(channel, payload)
    else:
        connection.on_commit(lambda: notifier.request(channel, payload))  # raises, as Django does
