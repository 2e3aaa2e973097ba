"""``runworkers --processes N``: a parent that runs N worker processes and restarts crashes.

Each child is a fresh ``manage.py runworkers`` process (not a fork), so no
connection, thread or lock is ever shared across processes. A child that exits
non-zero (a crash, ``kill -9``, an out-of-memory kill) is restarted with a
growing delay; the rows it held come back through their leases. SIGTERM/SIGINT
are forwarded to every child, which then drain gracefully.

Signals under a process manager: Ctrl-C and systemd's default ``KillMode`` signal
the whole process group, so each child gets the signal twice (from the kernel and
from this parent). A child takes any repeat that arrives within
``SIGNAL_REPEAT_SECONDS`` of the first as the same request (see
``worker/signals.py``); only a deliberate second signal after that forces an exit.
The exit code says how the children ended: 0 only when every child drained cleanly.

Children die with their parent: each child asks the kernel for SIGTERM when this
process dies (``PR_SET_PDEATHSIG``, Linux) and also watches its parent pid, so a
``kill -9`` of the supervisor drains its children instead of leaving them claiming.

A child whose given-up task thread (past its timeout, or aborted) is still
running ``SHUTDOWN_GRACE_SECONDS`` later drains itself and exits with
``RECYCLE_EXIT_CODE``: a thread cannot be killed, a process can be replaced. The
supervisor starts its successor at once (no crash backoff).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from .signals import StopSignals

logger = logging.getLogger("django_pgqueue.worker")

#: Exit code of a worker process that asks to be replaced (EX_TEMPFAIL).
RECYCLE_EXIT_CODE = 75

#: Environment variable that tells a child the pid of its supervisor.
SUPERVISOR_PID_ENV = "PGQUEUE_SUPERVISOR_PID"

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> bool:
    """Ask the kernel to send SIGTERM to this process when ``parent_pid`` dies.

    Linux only (``prctl(PR_SET_PDEATHSIG)``); False elsewhere, and when the parent is
    gone already (the caller then drains at once). The parent watch of the worker
    (``os.getppid()`` changing) covers the other platforms.
    """
    if not sys.platform.startswith("linux"):
        return os.getppid() == parent_pid
    try:
        # The process's own symbols include libc's: no find_library(), which runs
        # ldconfig in a subprocess on every start.
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    # The parent may have died before prctl: then no signal will ever come.
    return os.getppid() == parent_pid


class Supervisor:
    def __init__(self, child_argv: Sequence[str], processes: int) -> None:
        self.child_argv = list(child_argv)
        self.processes = processes
        self.stopping = threading.Event()
        self.children: dict[int, subprocess.Popen[bytes]] = {}
        self.restarts = 0
        self.recycled = 0
        self.forced = False

    def _spawn(self, slot: int) -> None:
        argv = [*self.child_argv, "--worker-slot", str(slot)]
        env = {**os.environ, SUPERVISOR_PID_ENV: str(os.getpid())}
        self.children[slot] = subprocess.Popen(argv, env=env)  # inherits stdout/stderr

    def _on_stop_signal(self, signum: int) -> None:
        """Stop, and pass the signal on: each child drains (signals.py's relay thread)."""
        self.stopping.set()
        self._forward(signum)

    def _on_second_stop_signal(self, signum: int) -> None:
        """A repeat after the window is forwarded too: each child then exits at once."""
        self.forced = True
        self.stopping.set()
        self._forward(signum)

    def _forward(self, signum: int) -> None:
        for child in list(self.children.values()):
            if child.poll() is None:
                child.send_signal(signum)

    def run(self) -> int:
        signals = StopSignals(
            self._on_stop_signal, self._on_second_stop_signal, name="pgqueue-supervisor-signals"
        )
        signals.install()
        try:
            for slot in range(self.processes):
                self._spawn(slot)
            delays = dict.fromkeys(range(self.processes), 0.5)
            done: set[int] = set()
            failed = 0  # children that ended non-zero once stopping
            while len(done) < self.processes:
                time.sleep(0.1)
                for slot, child in list(self.children.items()):
                    if slot in done:
                        continue
                    code = child.poll()
                    if code is None:
                        continue
                    if code == 0 or self.stopping.is_set():
                        # Killed by the stop signal itself: it came before the child
                        # installed its handlers, which it does before its first claim.
                        if code not in (0, -signal.SIGTERM, -signal.SIGINT):
                            failed += 1
                            logger.error(
                                "Worker process %d (pid %d) exited with %s while stopping",
                                slot,
                                child.pid,
                                code,
                            )
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
            return 1 if failed or self.forced else 0
        finally:
            signals.restore()


def child_argv(argv: Sequence[str]) -> list[str]:
    """The command line of one child: this command without ``--processes``, and
    with ``--skip-checks``.

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
    # The parent ran the system checks before it got here: each child skipping them
    # starts claiming sooner (they import the URLconf, a good part of a start-up).
    if "--skip-checks" not in out:
        out.append("--skip-checks")
    return out
