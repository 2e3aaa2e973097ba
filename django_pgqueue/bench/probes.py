"""The benchmark's worker children and what their probe jobs write: shared by the
workloads of ``core.py`` and ``pickup.py``, apart from both so neither imports the other."""

from __future__ import annotations

import signal
import subprocess
import time
from typing import Any


def read_latencies(path: str) -> dict[int, float]:
    """``seq -> ms`` from a probe file."""
    out: dict[int, float] = {}
    try:
        with open(path) as fh:
            for line in fh:
                parts = line.split()
                if len(parts) == 3:
                    out[int(parts[0])] = (float(parts[2]) - float(parts[1])) * 1000
    except FileNotFoundError:
        pass
    return out


def stop(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM a child we started, then SIGKILL it if it does not exit."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def warm_up(probe: Any, path: str, timeout: float = 60.0) -> None:
    """Enqueue probe ``-1`` and wait (up to ``timeout``) until it ran: the worker is up."""
    probe.enqueue(path, -1, time.time())
    deadline = time.monotonic() + timeout
    while not read_latencies(path) and time.monotonic() < deadline:
        time.sleep(0.02)
