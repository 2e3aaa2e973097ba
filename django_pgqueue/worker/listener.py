"""LISTEN on a dedicated connection and wake the claim loop on NOTIFY.

A notification only reaches sessions that are listening at that moment, so
after every (re)connect the listener wakes the claim loop once: the sweep that
picks up whatever was enqueued while it was away. What each NOTIFY named (its
payload on the main channel, or its channel for the others) is kept for the
claim loop, which asks only those sources again (``take_heard``). A periodic health query on
the same session detects a half-open connection that would otherwise stay
silent forever; keepalives back it up at the TCP level.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from psycopg import sql as pgsql

from ..db import connect
from ..notify import WAKE_ALL
from . import hooks

logger = logging.getLogger("django_pgqueue.worker")

#: Seconds the health query may take before the connection is declared dead.
HEALTH_TIMEOUT = 2.0


class Listener(threading.Thread):
    def __init__(
        self,
        *,
        channel: str,
        wake: threading.Event,
        stopping: threading.Event,
        worker_id: str,
        dsn: str | None,
        health_interval: float,
        test_hooks: frozenset[str],
        also: Sequence[str] = (),
        abort_channel: str | None = None,
        on_abort: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name="pgqueue-listener", daemon=True)
        self.channel = channel
        #: Further channels that wake the claim loop (message queues of consumers).
        self.also = tuple(also)
        #: A NOTIFY here means an operator aborted a running job: ``on_abort`` (the
        #: completer extends its leases at once), not a claim.
        self.abort_channel = abort_channel if on_abort is not None else None
        self.on_abort = on_abort
        self.wake = wake
        self.stopping = stopping
        self.worker_id = worker_id
        self.dsn = dsn
        self.health_interval = health_interval
        self.test_hooks = test_hooks
        self.connected = threading.Event()
        self.notifications = 0
        #: Bumped on every NOTIFY and after every (re)connect: the claim loop asks
        #: every source again when it changes (see Worker._claim_loop).
        self.wakeups = 0
        self.reconnects = 0
        #: What the NOTIFYs since the last ``take_heard`` named (WAKE_ALL: everything).
        self._heard: set[str] = set()
        self._heard_lock = threading.Lock()

    def take_heard(self) -> set[str]:
        """Payloads (main channel) and channels (the others) heard since the last call."""
        with self._heard_lock:
            heard, self._heard = self._heard, set()
        return heard

    def _hear(self, what: str) -> None:
        with self._heard_lock:
            self._heard.add(what)
        self.wakeups += 1
        self.wake.set()

    def run(self) -> None:
        delay = 0.2
        first = True
        while not self.stopping.is_set():
            conn: Any = None
            try:
                if not first and "listener_reconnecting" in self.test_hooks:
                    hooks.pause("listener_reconnecting", self.worker_id)
                conn = connect(f"listen-{self.worker_id}", dsn=self.dsn, prepare=False)
                abort = (self.abort_channel,) if self.abort_channel else ()
                for channel in (self.channel, *self.also, *abort):
                    conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(channel)))
                if not first:
                    self.reconnects += 1
                    logger.info("LISTEN connection restored; sweeping for missed work")
                first = False
                delay = 0.2
                self.connected.set()
                # Sweep: anything enqueued while we were not listening.
                self._hear(WAKE_ALL)
                self._listen(conn)
            except Exception as exc:
                self.connected.clear()
                if self.stopping.is_set():
                    break
                logger.warning("LISTEN connection lost (%s); reconnecting in %.1f s", exc, delay)
                self.stopping.wait(delay)
                delay = min(delay * 2, 10.0)
            finally:
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:  # noqa: S110 - already broken
                        pass
        self.connected.clear()

    def _listen(self, conn: Any) -> None:
        next_health = time.monotonic() + self.health_interval
        while not self.stopping.is_set():
            timeout = max(0.05, min(0.25, next_health - time.monotonic()))
            for notice in conn.notifies(timeout=timeout):
                self.notifications += 1
                if self.on_abort is not None and notice.channel == self.abort_channel:
                    self.on_abort()
                    continue
                self._hear(notice.payload if notice.channel == self.channel else notice.channel)
            if time.monotonic() >= next_health:
                self._health_check(conn)
                next_health = time.monotonic() + self.health_interval

    def _health_check(self, conn: Any) -> None:
        """Ask the session whether it still listens, with a client-side deadline.

        A half-open socket (the peer vanished without FIN/RST) would block the
        query forever: a timer shuts the socket down after HEALTH_TIMEOUT, which
        makes the blocked read fail and the loop reconnect.
        """
        fd = conn.fileno()
        timer = threading.Timer(HEALTH_TIMEOUT, _shutdown_socket, args=(fd,))
        timer.daemon = True
        timer.start()
        try:
            channels = [r[0] for r in conn.execute("SELECT pg_listening_channels()").fetchall()]
        finally:
            timer.cancel()
        if self.channel not in channels:
            raise RuntimeError(f"session no longer listens on {self.channel!r}")


def _shutdown_socket(fd: int) -> None:
    try:
        sock = socket.socket(fileno=socket.dup(fd))
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()
