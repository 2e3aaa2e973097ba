"""A real WSGI server (gunicorn, several worker processes) serving the project.

``pgqueue_bench``'s ingest workload measures the HTTP API through it; the API's
crash test kills its processes with SIGKILL; the demo and the Schemathesis run
send their requests to it. gunicorn is a development dependency (the ``dev``
extra), not one of the package's: :func:`gunicorn_unavailable` says why it cannot
run here.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def gunicorn_unavailable() -> str:
    """Why a server cannot be started here ("" when it can)."""
    if os.name != "posix":
        return "gunicorn runs on POSIX systems only"
    try:
        import gunicorn  # noqa: F401
    except ImportError:
        return "gunicorn is not installed (pip install gunicorn, or the dev extra)"
    return ""


def api_server_unavailable() -> str:
    """Why the HTTP API cannot be served here by :class:`Server` ("" when it can)."""
    reason = gunicorn_unavailable()
    if reason:
        return reason
    try:
        import django_pgqueue.api.urls  # noqa: F401
    except ImportError as exc:
        return f"the HTTP API is not installed ({exc}); install the api extra"
    return ""


def free_port() -> int:
    """A free loopback TCP port, as the kernel hands them out."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def children(pid: int) -> list[int]:
    """The direct child processes of ``pid`` (empty when it is gone)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(c) for c in fh.read().split()]
    except OSError:
        return []


class Server:
    """``gunicorn`` on 127.0.0.1 serving the WSGI application ``wsgi`` (``module:app``).

    ``workers`` processes of ``threads`` threads each (gthread: HTTP keep-alive, as
    a deployment behind a proxy uses it). ``env`` is added to this process's
    environment (``DATABASE_URL``, ``DJANGO_SETTINGS_MODULE``...). The server runs
    in its own session, so :meth:`crash` can SIGKILL the master and all its workers
    at once; :meth:`start` again brings it back on the same port.
    """

    def __init__(
        self,
        wsgi: str = "testproject.wsgi:application",
        *,
        workers: int = 2,
        threads: int = 4,
        env: dict[str, str] | None = None,
        port: int | None = None,
        cwd: str | Path | None = None,
        keep_alive: float = 5,
        timeout: float = 30,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.wsgi = wsgi
        self.workers = workers
        self.threads = threads
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.port = port or free_port()
        self.cwd = str(cwd or os.getcwd())
        self.keep_alive = keep_alive
        self.timeout = timeout
        self.extra_args = extra_args
        self.proc: subprocess.Popen[bytes] | None = None
        fd, self.logfile = tempfile.mkstemp(prefix="pgqueue-gunicorn-", suffix=".log")
        os.close(fd)
        self.starts = 0

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "gunicorn",
            "--bind",
            f"127.0.0.1:{self.port}",
            "--workers",
            str(self.workers),
            "--worker-class",
            "gthread",
            "--threads",
            str(self.threads),
            "--keep-alive",
            f"{self.keep_alive:g}",
            "--timeout",
            f"{self.timeout:g}",
            # A short grace on SIGTERM: a stopped benchmark or test must not wait.
            "--graceful-timeout",
            "5",
            "--log-level",
            "warning",
            *self.extra_args,
            self.wsgi,
        ]

    # -- lifecycle -----------------------------------------------------------------------

    def start(self, ready_path: str = "/", timeout: float = 60) -> Server:
        """Start the server and wait until a worker answers ``ready_path`` (any status)."""
        if self.running:
            raise RuntimeError("the server is already running")
        with open(self.logfile, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv(),
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.starts += 1
        self.wait_ready(ready_path, timeout)
        return self

    def wait_ready(self, path: str = "/", timeout: float = 60) -> None:
        """Poll until the server answers an HTTP request (any status counts)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited while starting:\n{self.log_text()[-4000:]}")
            try:
                with urllib.request.urlopen(self.url(path), timeout=5):  # noqa: S310 - our own loopback server
                    return
            except urllib.error.HTTPError:
                return  # a worker answered: the status does not matter
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"gunicorn did not answer on port {self.port} within {timeout:g} s:\n"
                        f"{self.log_text()[-4000:]}"
                    ) from None
                time.sleep(0.1)

    def wait_workers(self, timeout: float = 60) -> list[int]:
        """Wait until the master has all its worker processes; return their pids."""
        deadline = time.monotonic() + timeout
        while len(pids := self.worker_pids()) < self.workers:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{len(pids)} of {self.workers} gunicorn workers after {timeout:g} s"
                )
            time.sleep(0.05)
        return pids

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def master_pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("the server was never started")
        return self.proc.pid

    def worker_pids(self) -> list[int]:
        return children(self.master_pid) if self.running else []

    def kill_workers(self, count: int | None = None) -> list[int]:
        """SIGKILL ``count`` worker processes (all by default); the master replaces them."""
        pids = self.worker_pids()[: count if count is not None else None]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    def crash(self) -> None:
        """SIGKILL the master and every worker at once (a machine or container dying)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)
        # Orphaned workers are in the same process group: wait until they are gone so
        # that the port is free for the next start.
        deadline = time.monotonic() + 10
        while _group_alive(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)

    def stop(self) -> None:
        """SIGTERM (gunicorn's graceful stop), then SIGKILL the group if it lingers."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                pass
        self.crash()

    def close(self) -> None:
        """Stop the server and remove its log file."""
        self.stop()
        try:
            os.unlink(self.logfile)
        except OSError:
            pass

    def __enter__(self) -> Server:
        return self.start() if not self.running else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers ---------------------------------------------------------------------------

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def log_text(self) -> str:
        try:
            return Path(self.logfile).read_text(errors="replace")
        except OSError:
            return ""


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def post_json(conn: Any, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    """POST ``body`` on a keep-alive ``http.client.HTTPConnection``; return status and body."""
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **headers})
    response = conn.getresponse()
    return response.status, response.read()
