"""Worker heartbeats: a row per live worker process, kept fresh by its completer.

The completer thread already wakes every ``lease / 3`` seconds to extend leases over
its own connection; it calls :meth:`Heartbeat.tick` on the same cadence and the same
connection, so heartbeats cost one small statement per interval and no connection.
A clean stop deletes the row; a crash leaves it to go stale, which is how the admin
and ``pgqueue_status`` tell a gone worker (no beat for a whole lease) from a live one.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

from .. import sql
from ..__about__ import __version__
from ..db import is_connection_error

logger = logging.getLogger("django_pgqueue.worker")

#: How long a gone worker's row is kept (and shown as gone) before a live worker's
#: heartbeat prunes it.
GONE_KEPT_SECONDS = 3600.0


class Heartbeat:
    """The heartbeat row of one worker process."""

    def __init__(
        self, worker_id: str, queues: Sequence[str], concurrency: int, interval: float
    ) -> None:
        self.interval = interval
        self.params: dict[str, Any] = {
            "worker_id": worker_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "version": __version__,
            "queues": json.dumps(list(queues)),
            "concurrency": concurrency,
            "keep": GONE_KEPT_SECONDS,
        }
        self._next = 0.0
        self.beats = 0

    def tick(self, connection: Callable[[], Any], drop: Callable[[], None]) -> None:
        """Beat if an interval has passed since the last beat (the first call beats)."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.interval
        try:
            connection().execute(sql.HEARTBEAT, self.params)
            self.beats += 1
        except Exception as exc:
            if is_connection_error(exc):
                drop()
            logger.warning("Heartbeat failed (%s); will retry", exc)

    def stop(self, connection: Callable[[], Any]) -> None:
        """Remove the row: the worker stopped, it is not gone."""
        if not self.beats:
            return
        try:
            connection().execute(sql.HEARTBEAT_STOP, self.params)
        except Exception as exc:
            logger.warning("Could not remove the heartbeat row (%s); it will be pruned", exc)
