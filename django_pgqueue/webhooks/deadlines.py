"""The total deadline of one send, and the one watchdog thread per process that
cuts a connection whose deadline passed.

Shared by the HTTP transport (``transport.py``) and the AMQP publisher
(``brokers/amqp.py``), whose client has no limit of its own while it waits for a
confirm; in its own module so neither imports the other.
"""

from __future__ import annotations

import math
import socket
import threading
import time

from urllib3.connection import HTTPConnection

# How often the watchdog retries shutting a connection down when its deadline passed while
# the socket did not exist yet (connect still in progress).
_WATCHDOG_RETRY_SECONDS = 0.05


class _Deadline:
    """The total deadline of one request, the connection it may have to cut, and what that
    connection did (enough to tell a stale kept-alive connection from a receiver's answer).
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expires_at = time.monotonic() + seconds
        self.fired = False
        self.address: str | None = None
        #: The pool handed out a kept-alive connection (not one connected for this POST).
        self.reused = False
        #: Bytes of the response read from the socket so far.
        self.received = 0
        #: Set for the stale-connection resend: take no kept-alive connection from the pool.
        self.fresh_only = False
        self._finished = False
        self._conn: HTTPConnection | None = None
        self._lock = threading.Lock()

    def resend_fresh(self) -> None:
        """Prepare the one resend after a stale kept-alive connection."""
        self.fresh_only = True
        self.reused = False
        self.received = 0

    def attach(self, conn: HTTPConnection) -> None:
        with self._lock:
            self._conn = conn
            if self.fired:
                self._shutdown()

    def fire(self) -> bool:
        """Mark the deadline passed and cut the socket; True if it must be tried again."""
        with self._lock:
            if self._finished:
                return False
            self.fired = True
            return not self._shutdown()

    def finish(self) -> None:
        with self._lock:
            self._finished = True
            self._conn = None

    def _shutdown(self) -> bool:
        sock = getattr(self._conn, "sock", None)
        if sock is None:
            return False
        try:
            # The plain-socket shutdown, even for TLS: it wakes up a recv() blocked in
            # another thread, whereas SSLSocket.shutdown() would try a TLS close handshake.
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:
            pass
        return True


class _Watchdog:
    """One daemon thread per process that cuts connections whose deadline passed.

    It holds only the requests in flight (at most one per task thread) and sleeps until
    the earliest of their deadlines. Every request has the same budget, so a new one
    almost never expires before those already watched: ``watch`` then adds it without
    waking the thread. Waking it on every request would hand the GIL to the watchdog
    and back once per delivery, a quarter of a worker's time at a few hundred
    deliveries per second. A request that ends before its deadline is dropped
    from the set; the thread finds out when it wakes at that deadline and sleeps on.
    """

    def __init__(self) -> None:
        self._active: set[_Deadline] = set()
        self._cond = threading.Condition()
        self._wake_at = math.inf  # when the thread wakes next (inf: sleeping until told)
        self._thread: threading.Thread | None = None

    def watch(self, deadline: _Deadline) -> None:
        with self._cond:
            self._active.add(deadline)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="pgqueue-webhook-deadline", daemon=True
                )
                self._thread.start()
            if deadline.expires_at < self._wake_at:
                self._wake_at = deadline.expires_at
                self._cond.notify()

    def unwatch(self, deadline: _Deadline) -> None:
        with self._cond:
            self._active.discard(deadline)

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [d for d in self._active if d.expires_at <= now]
                self._active.difference_update(due)
                if not due:
                    self._wake_at = min((d.expires_at for d in self._active), default=math.inf)
                    self._cond.wait(None if self._wake_at == math.inf else self._wake_at - now)
                    continue
            retry = [d for d in due if d.fire()]
            if retry:
                # The socket did not exist yet (connect in progress): try again shortly.
                with self._cond:
                    for deadline in retry:
                        deadline.expires_at = time.monotonic() + _WATCHDOG_RETRY_SECONDS
                        self._active.add(deadline)


_watchdog = _Watchdog()
