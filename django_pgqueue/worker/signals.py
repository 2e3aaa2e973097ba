"""SIGTERM and SIGINT, acted on outside the signal handler.

Python runs a signal handler in the main thread between two bytecodes, wherever
that thread is: possibly inside ``Event.clear()`` or ``Event.wait()``, holding the
event's lock, which is not reentrant. A handler that sets that event then waits,
in the same thread, for a lock that thread holds: for ever. The worker's claim loop
clears and waits on its wake-up event many times a second, so a SIGTERM would now
and then leave a worker that never drains and never exits.

So the handler does one thing that takes no lock: it writes the signal's number to
a pipe (``os.write`` is async-signal-safe). A thread of its own reads the pipe and
does the rest (log, stop, force an exit), where a lock held by the main thread is
only waited for.

A signal to a process group (Ctrl-C, systemd's default ``KillMode``) reaches a
child of ``--processes`` directly and again through its supervisor, moments apart:
a repeat within ``SIGNAL_REPEAT_SECONDS`` of the first is that same request and is
dropped. A later one is a second request, which callers treat as "exit now".
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("django_pgqueue.worker")

#: A repeat of a stop signal within this many seconds of the first is the same request.
SIGNAL_REPEAT_SECONDS = 1.0

#: The signals that stop a worker or a supervisor.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

OnSignal = Callable[[int], None]


class StopSignals:
    """Route SIGTERM/SIGINT to ``on_first(signum)`` and, for a repeat after
    ``SIGNAL_REPEAT_SECONDS``, ``on_again(signum)``, both called in a daemon thread.

    ``install()`` only from the main thread (Python's rule for handlers); it returns
    False elsewhere and installs nothing. ``restore()`` puts the previous handlers back.
    """

    def __init__(self, on_first: OnSignal, on_again: OnSignal, *, name: str) -> None:
        self.on_first = on_first
        self.on_again = on_again
        self.name = name
        self._first: float | None = None
        self._old: dict[int, Any] = {}
        self._read_fd = -1
        self._write_fd = -1

    def install(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False
        self._read_fd, self._write_fd = os.pipe()
        # Never block the handler: a full pipe (thousands of unread signals) drops one.
        os.set_blocking(self._write_fd, False)
        threading.Thread(target=self._relay, name=self.name, daemon=True).start()
        for sig in STOP_SIGNALS:
            self._old[sig] = signal.signal(sig, self._handler)
        return True

    def restore(self) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old.clear()
        if self._write_fd >= 0:
            os.close(self._write_fd)  # the relay reads end-of-file and ends
            self._write_fd = -1

    def _handler(self, signum: int, frame: object) -> None:
        # Nothing else here: see the module's docstring.
        with contextlib.suppress(OSError):
            os.write(self._write_fd, bytes([signum]))

    def _relay(self) -> None:
        try:
            while True:
                data = os.read(self._read_fd, 64)
                if not data:
                    return
                for signum in data:
                    self._dispatch(signum)
        finally:
            os.close(self._read_fd)

    def _dispatch(self, signum: int) -> None:
        now = time.monotonic()
        if self._first is None:
            self._first = now
            self.on_first(signum)
        elif now - self._first < SIGNAL_REPEAT_SECONDS:
            logger.debug("Signal %s repeated: already stopping", signal.Signals(signum).name)
        else:
            self.on_again(signum)
