"""``runworkers --processes N``: a parent that runs N worker processes and restarts crashes.

Each child is a fresh ``manage.py runworkers`` process (not a fork), so no
connection, thread or lock is ever shared across processes. A child that exits
non-zero (a crash, ``kill -9``, an out-of-memory kill) is restarted with a
growing delay; the rows it held come back through their leases. SIGTERM/SIGINT
are forwarded to every child, which then drain gracefully.

A child whose given-up task thread (past its timeout, or aborted) is still
running ``SHUTDOWN_GRACE_SECONDS`` later drains itself and exits with
``RECYCLE_EXIT_CODE``: a thread cannot be killed, a process can be replaced. The
supervisor starts its successor at once (no crash backoff).
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

logger = logging.getLogger("django_pgqueue.worker")

#: Exit code of a worker process that asks to be replaced (EX_TEMPFAIL).
RECYCLE_EXIT_CODE = 75


class Supervisor:
    def __init__(self, child_argv: Sequence[str], processes: int) -> None:
        self.child_argv = list(child_argv)
        self.processes = processes
        self.stopping = threading.Event()
        self.children: dict[int, subprocess.Popen[bytes]] = {}
        self.restarts = 0
        self.recycled = 0

    def _spawn(self, slot: int) -> None:
        argv = [*self.child_argv, "--worker-slot", str(slot)]
        self.children[slot] = subprocess.Popen(argv)  # inherits stdout/stderr

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.stopping.is_set():
            for child in self.children.values():
                if child.poll() is None:
                    child.kill()
            return
        self.stopping.set()
        for child in self.children.values():
            if child.poll() is None:
                child.send_signal(signum)

    def run(self) -> int:
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            for slot in range(self.processes):
                self._spawn(slot)
            delays = dict.fromkeys(range(self.processes), 0.5)
            done: set[int] = set()
            while len(done) < self.processes:
                time.sleep(0.1)
                for slot, child in list(self.children.items()):
                    if slot in done:
                        continue
                    code = child.poll()
                    if code is None:
                        continue
                    if code == 0 or self.stopping.is_set():
                        done.add(slot)
                        continue
                    if code == RECYCLE_EXIT_CODE:
                        self.recycled += 1
                        logger.warning(
                            "Worker process %d (pid %d) drained to shed a stuck task thread; "
                            "starting a fresh one",
                            slot,
                            child.pid,
                        )
                        self._spawn(slot)
                        continue
                    self.restarts += 1
                    logger.error(
                        "Worker process %d (pid %d) exited with %s; restarting in %.1f s",
                        slot,
                        child.pid,
                        code,
                        delays[slot],
                    )
                    self.stopping.wait(delays[slot])
                    if self.stopping.is_set():
                        done.add(slot)
                        continue
                    delays[slot] = min(delays[slot] * 2, 30.0)
                    self._spawn(slot)
            return 0
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)


def child_argv(argv: Sequence[str]) -> list[str]:
    """The command line of one child: this command without ``--processes``.

    A parent started as ``python -m django ...`` has the package's ``__main__.py``
    in ``argv[0]``; run as a script, its folder would shadow the standard library
    (``django/http`` for ``http``), so the child is started with ``-m`` as well.
    """
    out: list[str] = [sys.executable]
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name.endswith(".__main__") and argv:
        out += ["-m", spec.name.removesuffix(".__main__")]
        argv = argv[1:]
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--processes":
            skip = True
            continue
        if arg.startswith("--processes="):
            continue
        out.append(arg)
    return out
