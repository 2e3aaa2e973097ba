"""Pytest fixtures for fault-injection tests: a private cluster, a fault proxy, a PgBouncer.

Import the fixtures into a test module or a conftest (``from .support.fault_fixtures import *``
or by name). None of them needs Django.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

try:  # importable both as tests.support.fault_fixtures and as a top-level module
    from .faultproxy import FaultProxy
    from .pgbouncer import PgBouncer
    from .pgcluster import PgCluster
except ImportError:
    from faultproxy import FaultProxy  # type: ignore[no-redef]
    from pgbouncer import PgBouncer  # type: ignore[no-redef]
    from pgcluster import PgCluster  # type: ignore[no-redef]

__all__ = ["fault_db", "fault_pg", "fault_proxy", "pgbouncer_proxy"]


@pytest.fixture(scope="session")
def fault_pg() -> Iterator[PgCluster]:
    """One private PostgreSQL 15 cluster per test session (tests may crash-restart it)."""
    cluster = PgCluster(settings={"max_connections": 50})
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.cleanup()


@pytest.fixture
def fault_db(fault_pg: PgCluster) -> str:
    """A fresh, empty database on ``fault_pg``; returns its DSN."""
    return fault_pg.create_database(f"t_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def fault_proxy(fault_pg: PgCluster) -> Iterator[FaultProxy]:
    """A started FaultProxy in front of ``fault_pg``; stopped (all links RST) after the test."""
    proxy = FaultProxy("127.0.0.1", fault_pg.port)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture
def pgbouncer_proxy(fault_pg: PgCluster) -> Iterator[Callable[[str], PgBouncer]]:
    """A factory that starts a transaction-mode PgBouncer for a database of ``fault_pg``."""
    started: list[PgBouncer] = []

    def make(dbname: str, pool_mode: str = "transaction") -> PgBouncer:
        bouncer = PgBouncer("127.0.0.1", fault_pg.port, dbname, pool_mode=pool_mode)
        started.append(bouncer)
        return bouncer.start()

    try:
        yield make
    finally:
        for bouncer in started:
            bouncer.stop()
