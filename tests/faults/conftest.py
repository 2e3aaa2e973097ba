"""Fixtures of the fault suite: worker environments, migrated databases on a private
cluster, and the per-test summary line (faults, tasks, duplicates, lost, recovery time).

Run the suite alone with ``pytest -m fault`` (see docs/guarantees.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import sql as pgsql

from ..conftest import REPO, database_url
from ..support.pgcluster import PgCluster

#: Lease and poll of fault-test workers: short, so a lapse costs seconds, not minutes.
LEASE = 2.0
POLL = 0.5

_SUMMARY_KEY = pytest.StashKey[list[str]]()


def worker_env(**knobs: Any) -> dict[str, str]:
    """Environment of a fault-test worker subprocess (see testproject/settings.py)."""
    env = {
        "PGQUEUE_LEASE_SECONDS": str(LEASE),
        "PGQUEUE_POLL_INTERVAL": str(POLL),
        "PGQUEUE_TEST_HOOKS": "1",
        "PGQUEUE_COMPLETION_RETRY_SECONDS": "1",
        "PGQUEUE_LOG_LEVEL": "INFO",
    }
    env.update({k: str(v) for k, v in knobs.items()})
    return env


@pytest.fixture
def test_dsn(transactional_db: None) -> str:
    """libpq URL of Django's test database (the one ``worker_process`` children use)."""
    return database_url()


@dataclass
class Summary:
    name: str
    lines: list[str]
    started: float

    def __call__(
        self,
        *,
        faults: int,
        tasks: int,
        duplicates: int,
        lost: int,
        recover: float | None = None,
        note: str = "",
    ) -> str:
        recovered = f"{recover:.2f}s" if recover is not None else "-"
        line = (
            f"{self.name}: faults={faults} tasks={tasks} duplicates={duplicates} lost={lost} "
            f"recover={recovered} wall={time.monotonic() - self.started:.1f}s"
            + (f" ({note})" if note else "")
        )
        self.lines.append(line)
        print("FAULT-SUMMARY " + line)
        path = os.environ.get("PGQUEUE_FAULT_REPORT")
        if path:
            with open(path, "a") as fh:
                fh.write(line + "\n")
        return line


@pytest.fixture
def summary(request: pytest.FixtureRequest) -> Summary:
    """``summary(faults=1, tasks=1, duplicates=0, lost=0, recover=2.1)`` prints one line."""
    lines = request.config.stash.setdefault(_SUMMARY_KEY, [])
    return Summary(request.node.name, lines, time.monotonic())


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = config.stash.get(_SUMMARY_KEY, [])
    if lines:
        terminalreporter.section("fault summary")
        for line in lines:
            terminalreporter.write_line(line)


# -- a migrated queue database on the private cluster ----------------------------------------

TEMPLATE_DB = "pgq_fault_template"


def _manage(url: str, *args: str, timeout: float = 120) -> str:
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
    }
    proc = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"manage.py {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="session")
def cluster_template(fault_pg: PgCluster) -> str:
    """A database on the private cluster migrated once (``manage.py migrate`` in a child)."""
    fault_pg.create_database(TEMPLATE_DB)
    _manage(fault_pg.url(TEMPLATE_DB), "migrate", "--no-input", "-v", "0")
    return TEMPLATE_DB


@dataclass
class ClusterDb:
    cluster: PgCluster
    name: str

    @property
    def url(self) -> str:
        return self.cluster.url(self.name)

    @property
    def dsn(self) -> str:
        return self.cluster.dsn(self.name)


@pytest.fixture
def cluster_db(fault_pg: PgCluster, cluster_template: str) -> Iterator[ClusterDb]:
    """A fresh migrated queue database on the private cluster (a copy of the template)."""
    name = f"q_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(fault_pg.dsn(), autocommit=True, connect_timeout=10) as conn:
        conn.execute(
            pgsql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                pgsql.Identifier(name), pgsql.Identifier(cluster_template)
            )
        )
    yield ClusterDb(fault_pg, name)
    try:
        with psycopg.connect(fault_pg.dsn(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(
                pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pgsql.Identifier(name))
            )
    except psycopg.Error:
        pass  # the cluster is thrown away at the end of the session anyway


@pytest.fixture
def producer(cluster_db: ClusterDb) -> Callable[..., subprocess.Popen[str]]:
    """Start ``tests/faults/producer.py`` (real ``Task.enqueue`` calls) against a URL."""
    procs: list[subprocess.Popen[str]] = []

    def start(url: str, count: int, **env: str) -> subprocess.Popen[str]:
        full_env = {
            **os.environ,
            "DATABASE_URL": url,
            "DJANGO_SETTINGS_MODULE": "testproject.settings",
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "tests" / "faults" / "producer.py"), str(count)],
            cwd=REPO,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        procs.append(proc)
        return proc

    yield start  # type: ignore[misc]
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
