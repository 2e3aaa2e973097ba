"""Tasks the benchmark enqueues: a no-op and a wake-up latency probe."""

from __future__ import annotations

import os
import time

from ..compat import task


@task()
def noop() -> None:
    return None


@task()
def probe(path: str, seq: int, t_enqueue: float) -> None:
    """Record ``seq t_enqueue t_start`` in ``path``: its first statement reads the clock."""
    t_start = time.time()
    line = f"{seq} {t_enqueue:.6f} {t_start:.6f}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)  # one O_APPEND write: safe across processes
    finally:
        os.close(fd)


@task()
def pause(seconds: float) -> None:
    """Sleep ``seconds``: a job of known duration, so a worker's capacity is known."""
    time.sleep(seconds)
