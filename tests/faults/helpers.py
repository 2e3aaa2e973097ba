"""Helpers of the fault suite: direct SQL on a queue database, the ledger, pause control.

Assertions always read through a *direct* psycopg connection (never through a
fault proxy or PgBouncer), so what they see is what the server holds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from django_pgqueue import sql
from django_pgqueue.jobs.store import NewJobs

from ..conftest import REPO, database_url
from ..conftest import wait_for as wait_until

TERMINAL = ("succeeded", "dead", "cancelled")
RECORD_RUN = "testproject.demo.tasks.record_run"


def dsn_of(url: str) -> str:
    """libpq accepts URLs; keep a name that says so."""
    return url


def query(dsn: str, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def enqueue_sql(
    dsn: str,
    n: int = 1,
    *,
    task_path: str = RECORD_RUN,
    args: list[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    max_attempts: int = 5,
    queue: str = "default",
) -> list[int]:
    """Enqueue ``n`` jobs with the backend's own INSERT statement (one transaction)."""
    ids = []
    with psycopg.connect(dsn, connect_timeout=5) as conn, conn.transaction():
        for _ in range(n):
            new = NewJobs(
                priority=0,
                max_attempts=max_attempts,
                run_after=None,
                task_path=task_path,
                queue_name=queue,
                backend="default",
            )
            row = conn.execute(
                sql.INSERT_JOB, new.values(json.dumps(args or []), json.dumps(kwargs or {}))
            ).fetchone()
            assert row is not None
            ids.append(row[0])
        conn.execute("SELECT pg_notify('pgqueue', '')")
    return ids


def job(dsn: str, job_id: int) -> dict[str, Any]:
    rows = query(
        dsn,
        "SELECT id, status, attempts, max_attempts, locked_by, locked_until, last_error, errors,"
        " worker_ids, started_at, last_attempted_at, finished_at, next_attempt_at, created_at"
        " FROM pgqueue_job WHERE id = %s",
        (job_id,),
    )
    assert rows, f"job {job_id} does not exist"
    keys = [
        "id",
        "status",
        "attempts",
        "max_attempts",
        "locked_by",
        "locked_until",
        "last_error",
        "errors",
        "worker_ids",
        "started_at",
        "last_attempted_at",
        "finished_at",
        "next_attempt_at",
        "created_at",
    ]
    return dict(zip(keys, rows[0], strict=True))


def db_now(dsn: str) -> Any:
    return query(dsn, "SELECT clock_timestamp()")[0][0]


def terminate(dsn: str, application_name_like: str) -> int:
    """pg_terminate_backend the sessions of this database whose name matches; return count."""
    rows = query(
        dsn,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE application_name LIKE %s AND datname = current_database()"
        " AND pid <> pg_backend_pid()",
        (application_name_like,),
    )
    return sum(1 for (ok,) in rows if ok)


def backends(dsn: str, application_name_like: str) -> int:
    return query(
        dsn,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s"
        " AND datname = current_database()",
        (application_name_like,),
    )[0][0]


@dataclass
class Ledger:
    """Where every job of a run ended, and how often its handler ran."""

    tasks: int
    states: dict[str, int]
    runs: int
    duplicates: int
    lost: list[int] = field(default_factory=list)
    stuck: list[int] = field(default_factory=list)

    @property
    def terminal(self) -> bool:
        return not self.stuck


def ledger(dsn: str, ids: Iterable[int] | None = None) -> Ledger:
    """Count states and handler runs (demo TaskRun rows) of ``ids`` (default: all jobs).

    ``lost``: a job that vanished, or that says it succeeded but whose handler never ran.
    ``stuck``: a job not (yet) in a terminal state.
    """
    wanted = sorted(set(ids)) if ids is not None else None
    where, params = ("WHERE j.id = ANY(%s)", (wanted,)) if wanted is not None else ("", None)
    rows = query(
        dsn,
        "SELECT j.id, j.status, j.task_path, (SELECT count(*) FROM demo_taskrun r"
        f" WHERE r.job_id = j.id) FROM pgqueue_job j {where}",
        params,
    )
    seen = {r[0] for r in rows}
    states: dict[str, int] = {}
    runs = duplicates = 0
    lost = [i for i in wanted or [] if i not in seen]
    stuck = []
    for job_id, status, task_path, n in rows:
        states[status] = states.get(status, 0) + 1
        runs += n
        duplicates += max(0, n - 1)
        if status not in TERMINAL:
            stuck.append(job_id)
        elif status == "succeeded" and task_path == RECORD_RUN and n == 0:
            lost.append(job_id)
    return Ledger(len(rows), states, runs, duplicates, lost, stuck)


def wait_terminal(dsn: str, ids: Iterable[int] | None, timeout: float) -> Ledger:
    """Poll until every job is terminal; fail with the ledger after ``timeout`` seconds."""
    ids = list(ids) if ids is not None else None
    deadline = time.monotonic() + timeout
    while True:
        book = ledger(dsn, ids)
        if book.terminal:
            return book
        if time.monotonic() > deadline:
            raise AssertionError(f"jobs not terminal after {timeout:.0f}s: {book}")
        time.sleep(0.05)


def wait_text(proc: Any, text: str, timeout: float = 30, start: int = 0) -> str:
    """Wait for an output line of a WorkerProcess that contains ``text``."""
    deadline = time.monotonic() + timeout
    with proc._cond:
        while True:
            for line in proc.lines[start:]:
                if text in line:
                    return line
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no line containing {text!r}; output:\n{proc.output()}")
            proc._cond.wait(min(remaining, 0.25))


def count_text(proc: Any, text: str) -> int:
    with proc._cond:
        return sum(1 for line in proc.lines if text in line)


class AutoResume:
    """Answer every ``PAUSED`` line of a worker from line ``start`` on (the fault is over)."""

    def __init__(self, proc: Any, start: int = 0) -> None:
        self.proc, self.next = proc, start
        self.stopped = threading.Event()
        self.resumed = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.is_set() and self.proc.proc.poll() is None:
            with self.proc._cond:
                lines = self.proc.lines[self.next :]
                self.next += len(lines)
                if not lines:
                    self.proc._cond.wait(0.1)
            for line in lines:
                if line.startswith("PAUSED "):
                    try:
                        self.proc.resume()
                        self.resumed += 1
                    except (BrokenPipeError, ValueError):
                        return

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(2)


def paused_fields(line: str) -> tuple[str, int | None, uuid.UUID | None]:
    """``PAUSED <point> <job_id> <token>`` -> (point, job id, token)."""
    parts = line.split()
    job_id = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else None
    token = uuid.UUID(parts[3]) if len(parts) > 3 else None
    return parts[1], job_id, token


def line_index(proc: Any) -> int:
    with proc._cond:
        return len(proc.lines)


def kill_prune_when(dsn: str, reached: Callable[[], bool], what: str) -> None:
    """Run ``manage.py pgqueue_prune`` in a real process, SIGKILL it once ``reached()``
    (``what`` names that moment), then cut its session on the server too."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
    }
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "pgqueue_prune", "-v", "2"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(reached, 120, what)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    terminate(dsn, "pgqueue-prune")
