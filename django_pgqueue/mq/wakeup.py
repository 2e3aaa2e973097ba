"""Wake ``read_with_poll`` callers when a message is sent: one LISTEN per process.

``send`` requests a coalesced NOTIFY on the queue's channel after its commit
(``notify.notifier``, the same sender that wakes task workers). A waiting reader
registers an event for its queue's channel here; one daemon thread holds the
process's LISTEN connection and sets the events of the channels it hears from.

The reader registers *before* its read, so a message committed between an empty
read and the wait still wakes it. After every (re)connect every waiter is woken
once, as notifications are lost while not listening. Polling stays the backstop:
a waiter never sleeps longer than its poll interval.

The connection is closed when no reader has waited for ``IDLE_CLOSE_SECONDS``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from psycopg import sql as pgsql

logger = logging.getLogger("django_pgqueue.mq")

#: The listening connection is closed after this long without any waiter.
IDLE_CLOSE_SECONDS = 10.0
#: How long ``notifies()`` blocks before the thread looks at new channels.
TICK_SECONDS = 0.05
#: How long a waiter waits for its channel's LISTEN before relying on polling.
LISTEN_READY_SECONDS = 2.0


class WakeupListener:
    """Per-process LISTEN thread that wakes waiting readers by channel."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, set[threading.Event]] = {}
        self._listening: set[str] = set()
        self._listened = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._last_waiter = time.monotonic()
        self.notifications = 0

    @contextmanager
    def waiting(self, channel: str, ready_within: float) -> Iterator[threading.Event]:
        """An event set when ``channel`` is notified.

        On entry LISTEN is active, or ``ready_within`` seconds (at most
        LISTEN_READY_SECONDS) have passed and the caller relies on polling.
        """
        event = threading.Event()
        with self._lock:
            self._waiters.setdefault(channel, set()).add(event)
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(
                    target=self._run, name="pgqueue-mq-listener", daemon=True
                )
                self._thread.start()
            deadline = time.monotonic() + min(ready_within, LISTEN_READY_SECONDS)
            while channel not in self._listening and time.monotonic() < deadline:
                self._listened.wait(TICK_SECONDS)
        try:
            yield event
        finally:
            with self._lock:
                events = self._waiters.get(channel)
                if events is not None:
                    events.discard(event)
                    if not events:
                        del self._waiters[channel]
                self._last_waiter = time.monotonic()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread and close its connection (tests drop their database after)."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        from ..conf import get_settings
        from ..db import connect

        delay = 0.2
        while not self._stop.is_set():
            conn: Any = None
            try:
                # LISTEN needs a session: LISTEN_DSN bypasses a transaction pooler.
                conn = connect("mq-listen", dsn=get_settings().LISTEN_DSN, prepare=False)
                with self._lock:
                    self._listening.clear()
                    wanted = set(self._waiters)
                for channel in wanted:
                    self._listen(conn, channel)
                self._wake_all()  # whatever was sent while we were not listening
                delay = 0.2
                if self._loop(conn):
                    return
            except Exception as exc:
                if self._stop.is_set():
                    break
                logger.warning("mq LISTEN connection lost (%s); reconnecting in %.1f s", exc, delay)
                self._wake_all()
                self._stop.wait(delay)
                delay = min(delay * 2, 10.0)
            finally:
                with self._lock:
                    self._listening.clear()
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:  # noqa: S110 - already broken
                        pass

    def _loop(self, conn: Any) -> bool:
        """Listen until stopped or idle (True: the thread should end)."""
        while not self._stop.is_set():
            for notify in conn.notifies(timeout=TICK_SECONDS):
                self.notifications += 1
                with self._lock:
                    events = list(self._waiters.get(notify.channel, ()))
                for event in events:
                    event.set()
            with self._lock:
                new = set(self._waiters) - self._listening
                idle = not self._waiters and (
                    time.monotonic() - self._last_waiter > IDLE_CLOSE_SECONDS
                )
                if idle:
                    self._thread = None
                    return True
            for channel in new:
                self._listen(conn, channel)
        return True

    def _listen(self, conn: Any, channel: str) -> None:
        conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(channel)))
        with self._lock:
            self._listening.add(channel)
            self._listened.notify_all()

    def _wake_all(self) -> None:
        with self._lock:
            events = [e for events in self._waiters.values() for e in events]
        for event in events:
            event.set()


listener = WakeupListener()
