"""Shared fixtures: real PostgreSQL (the test database of DATABASE_URL), workers in
threads and in subprocesses, and the fault-injection tooling."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from .support.fault_fixtures import fault_db, fault_pg, fault_proxy, pgbouncer_proxy  # noqa: F401

REPO = Path(__file__).resolve().parent.parent

# The helper users load the same way (docs/testing.md): the pgqueue_jobs fixture.
pytest_plugins = ["django_pgqueue.testing"]

#: Tests that share something beyond their xdist worker's own test database: they
#: kill or restart PostgreSQL clusters, count sessions across databases, measure
#: timings, or drive a browser. ``scripts/dev.py test`` runs them in a second,
#: serial pass (``-m serial``) after the parallel one (``-m "not serial"``).
SERIAL_PATHS = (
    "tests/faults/",
    "tests/test_fault_tooling.py",
    "tests/test_bench.py",
    "tests/test_unique.py",
    "tests/worker/test_processes.py",
    "tests/periodic/test_processes.py",
    "tests/mq/test_unlogged_crash.py",
)
SERIAL_MARKERS = ("fault", "browser", "slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        where = Path(str(item.path)).resolve().relative_to(REPO).as_posix()
        if where.startswith(SERIAL_PATHS) or any(
            item.get_closest_marker(m) for m in SERIAL_MARKERS
        ):
            item.add_marker(pytest.mark.serial)


@pytest.fixture(autouse=True)
def _close_notifier_connection() -> Iterator[None]:
    """The NOTIFY sender keeps a connection; close it so test databases can be dropped."""
    yield
    from django_pgqueue.notify import notifier

    notifier.close()


def database_url(alias: str = "default") -> str:
    """URL of the (test) database of ``alias`` Django is connected to, for child processes."""
    from django.db import connections

    s = connections[alias].settings_dict
    user = quote(s.get("USER") or "", safe="")
    password = quote(s.get("PASSWORD") or "", safe="")
    auth = user + (f":{password}" if password else "")
    host = s.get("HOST") or ""
    port = s.get("PORT") or ""
    name = s["NAME"]
    if host.startswith("/"):
        return f"postgresql://{auth}@/{name}?host={quote(host, safe='/')}" + (
            f"&port={port}" if port else ""
        )
    return f"postgresql://{auth}@{host or '127.0.0.1'}{':' + str(port) if port else ''}/{name}"


def _queue_database_env() -> dict[str, str]:
    """QUEUE_DATABASE_URL for a child, when this test has a test queue database.

    Named, not left to the settings to derive: under pytest-xdist the test queue
    database is ``test_<name>_queue_gw0``, not the default's test name plus "_queue".
    Without one (the test did not ask for "queue"), the child derives it as before.
    """
    from django.db import connections

    if not connections["queue"].settings_dict["NAME"].startswith("test_"):
        return {}
    return {"QUEUE_DATABASE_URL": database_url("queue")}


def wait_for(
    predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.02
) -> Any:
    """Poll ``predicate`` until it is truthy; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what}")
        time.sleep(interval)


def job_status(job_id: int | str) -> str:
    from django_pgqueue.models import Job

    return Job.objects.values_list("status", flat=True).get(pk=int(job_id))


@pytest.fixture
def run_worker(transactional_db: None) -> Iterator[Callable[..., Any]]:
    """Run a Worker in a thread of this process: ``run_worker(burst=True, ...)``.

    With ``burst=True`` it returns the finished worker; otherwise it returns the
    running worker, which is stopped at teardown.
    """
    from django_pgqueue.worker import Worker

    started: list[tuple[Any, threading.Thread]] = []

    def start(burst: bool = True, timeout: float = 60, **kwargs: Any) -> Any:
        kwargs.setdefault("install_signal_handlers", False)
        kwargs.setdefault("concurrency", 2)
        worker = Worker(burst=burst, **kwargs)
        result: dict[str, Any] = {}
        thread = threading.Thread(
            target=lambda: result.setdefault("code", worker.run()), daemon=True
        )
        thread.start()
        if burst:
            thread.join(timeout)
            assert not thread.is_alive(), "burst worker did not finish"
            assert result.get("code") == 0
        else:
            started.append((worker, thread))
        return worker

    yield start
    for worker, thread in started:
        worker.stop()
        thread.join(30)


class WorkerProcess:
    """A ``manage.py runworkers`` child process with line-based stdout access."""

    def __init__(
        self, args: list[str], env: dict[str, str], prefix: list[str] | None = None
    ) -> None:
        self.proc = subprocess.Popen(
            [*(prefix or []), sys.executable, str(REPO / "manage.py"), "runworkers", *args],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_line(self, prefix: str, timeout: float = 30, start: int = 0) -> str:
        """Wait for an output line starting with ``prefix`` (a barrier, not a sleep)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines[start:]:
                    if line.startswith(prefix):
                        return line
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(
                        f"no line starting with {prefix!r}; output so far:\n"
                        + "\n".join(self.lines)
                    )
                self._cond.wait(min(remaining, 0.5))

    def resume(self) -> None:
        """Let a paused worker go on (answers its PAUSED line)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def wait(self, timeout: float = 60) -> int:
        """The exit code; a process still running after ``timeout`` is aborted with
        SIGABRT, whose faulthandler dump (every thread's stack) ends its output, and
        the test fails with that output, so a hang says where it hung."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGABRT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
            self._reader.join(5)
            raise AssertionError(
                f"worker {self.proc.pid} still running after {timeout:g} s; its output "
                "and its threads' stacks:\n" + self.output()
            ) from None

    def output(self) -> str:
        return "\n".join(self.lines)

    def close(self) -> None:
        """Kill the process group if still running and close the pipes."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)
        self._reader.join(5)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass


@pytest.fixture
def worker_process(transactional_db: None) -> Iterator[Callable[..., WorkerProcess]]:
    """Start ``manage.py runworkers`` subprocesses against the test database.

    ``worker_process("--burst", env={"PGQUEUE_LEASE_SECONDS": "2"})``. Children are
    killed at teardown (only the PIDs this fixture started).
    """
    procs: list[WorkerProcess] = []

    def start(
        *args: str, env: dict[str, str] | None = None, prefix: list[str] | None = None
    ) -> WorkerProcess:
        full_env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            **_queue_database_env(),
            "DJANGO_SETTINGS_MODULE": "testproject.settings",
            "PYTHONUNBUFFERED": "1",
            # A hung child aborted by WorkerProcess.wait prints every thread's stack.
            "PYTHONFAULTHANDLER": "1",
            **(env or {}),
        }
        proc = WorkerProcess(list(args), full_env, prefix)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.close()


@pytest.fixture
def clean_history() -> Iterator[None]:
    """Django's flush leaves unmanaged tables alone: drop the job history's partitions
    (and their rows) before and after a test that fills it."""
    from django_pgqueue import history
    from django_pgqueue.db import connect

    def drop_all() -> None:
        with connect("test-history") as conn:
            for part in history.partitions(conn):
                conn.execute(f'DROP TABLE "{part.name}"')

    drop_all()
    yield
    drop_all()
