"""Tests of the fault-injection tooling itself: proxy toxics, private cluster, PgBouncer.

They use plain psycopg against a private cluster and need neither Django nor the queue.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

try:  # importable both as tests.test_fault_tooling and as a top-level module
    from .support.fault_fixtures import fault_db, fault_pg, fault_proxy, pgbouncer_proxy
    from .support.faultproxy import FaultProxy
    from .support.pgbouncer import PgBouncer
    from .support.pgcluster import PgCluster, wait_until
except ImportError:
    from support.fault_fixtures import (  # type: ignore[no-redef]
        fault_db,
        fault_pg,
        fault_proxy,
        pgbouncer_proxy,
    )
    from support.faultproxy import FaultProxy  # type: ignore[no-redef]
    from support.pgbouncer import PgBouncer  # type: ignore[no-redef]
    from support.pgcluster import PgCluster, wait_until  # type: ignore[no-redef]

__all__ = ["fault_db", "fault_pg", "fault_proxy", "pgbouncer_proxy"]  # fixtures, re-exported

pytestmark = [pytest.mark.fault, pytest.mark.timeout(60)]

MARKER = b"/* pgqueue:complete */"


def connect(dsn: str, **kwargs: object) -> psycopg.Connection:
    """psycopg.connect with a bounded connect timeout unless the test sets one."""
    kwargs.setdefault("connect_timeout", 5)
    return psycopg.connect(dsn, **kwargs)  # type: ignore[arg-type]


def make_job_table(dsn: str) -> None:
    with connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE job (id int PRIMARY KEY, state text NOT NULL)")
        conn.execute("INSERT INTO job VALUES (1, 'running')")


def job_state(dsn: str) -> str:
    with connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT state FROM job WHERE id = 1").fetchone()
    assert row is not None
    return row[0]


def test_cluster_is_private_and_configured(fault_pg: PgCluster) -> None:
    assert fault_pg.port != 5432
    assert str(fault_pg.datadir).startswith(str(fault_pg.basedir))
    with connect(fault_pg.dsn(), autocommit=True) as conn:
        assert conn.execute("SHOW max_connections").fetchone() == ("50",)
        assert conn.execute("SHOW data_directory").fetchone() == (str(fault_pg.datadir),)
    with pytest.raises(ValueError, match="5432"):
        PgCluster(port=5432)


def test_dsn_for_rewrites_url_and_keyword_dsn(fault_proxy: FaultProxy) -> None:
    port = fault_proxy.port
    url = "postgresql://app:secret@db.example:6543/queue?sslmode=disable&host=other"
    assert (
        fault_proxy.dsn_for(url)
        == f"postgresql://app:secret@127.0.0.1:{port}/queue?sslmode=disable"
    )
    assert fault_proxy.dsn_for("postgres://localhost/q") == f"postgres://127.0.0.1:{port}/q"
    params = conninfo_to_dict(
        fault_proxy.dsn_for("host=db port=1 hostaddr=10.0.0.1 dbname=q user=u")
    )
    assert params == {"host": "127.0.0.1", "port": str(port), "dbname": "q", "user": "u"}


def test_proxy_forwards_and_counts(fault_db: str, fault_proxy: FaultProxy) -> None:
    with connect(fault_proxy.dsn_for(fault_db), autocommit=True) as conn:
        assert conn.execute("SELECT 40 + %s", (2,)).fetchone() == (42,)
        assert fault_proxy.connections == 1
        assert fault_proxy.connections_total == 1
        assert fault_proxy.bytes_upstream > 0 and fault_proxy.bytes_downstream > 0
        assert fault_proxy.bytes == fault_proxy.bytes_upstream + fault_proxy.bytes_downstream
    wait_until(lambda: fault_proxy.connections == 0, 5, "the proxy to drop the closed link")


def test_down_breaks_open_connections_and_refuses_new(
    fault_db: str, fault_proxy: FaultProxy
) -> None:
    dsn = fault_proxy.dsn_for(fault_db)
    with connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT 1")
        fault_proxy.down()
        assert fault_proxy.connections == 0
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    with pytest.raises(psycopg.OperationalError, match="refused"):
        connect(dsn)
    fault_proxy.up()
    with connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_reset_peer_rsts_open_connections_only(fault_db: str, fault_proxy: FaultProxy) -> None:
    dsn = fault_proxy.dsn_for(fault_db)
    with connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT 1")
        fault_proxy.reset_peer()
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    with connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_blackhole_hangs_queries_until_released(fault_db: str, fault_proxy: FaultProxy) -> None:
    dsn = fault_proxy.dsn_for(fault_db)
    conn = connect(dsn, autocommit=True)
    try:
        fault_proxy.blackhole()
        outcome: dict[str, object] = {}

        def query() -> None:
            try:
                outcome["row"] = conn.execute("SELECT 42").fetchone()
            except Exception as exc:
                outcome["error"] = exc

        worker = threading.Thread(target=query, daemon=True)
        worker.start()
        worker.join(1.0)  # the assertion is that nothing happens within this bound
        assert worker.is_alive(), f"query finished through a blackhole: {outcome}"
        # The socket is open but silent, so a new connection times out in its startup.
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError):
            connect(dsn, connect_timeout=2)
        assert time.monotonic() - started >= 1.5
        # Held bytes are delivered once the partition heals, like TCP retransmission.
        fault_proxy.unblackhole()
        worker.join(10)
        assert not worker.is_alive()
        assert outcome == {"row": (42,)}
    finally:
        conn.close()


def test_latency_delays_each_round_trip(fault_db: str, fault_proxy: FaultProxy) -> None:
    with connect(fault_proxy.dsn_for(fault_db), autocommit=True) as conn:
        fault_proxy.latency(300, jitter=20)
        started = time.monotonic()
        assert conn.execute("SELECT 1").fetchone() == (1,)
        assert time.monotonic() - started >= 0.28
        fault_proxy.reset()
        started = time.monotonic()
        conn.execute("SELECT 1")
        assert time.monotonic() - started < 0.28


def test_limit_data_closes_the_connection(fault_db: str, fault_proxy: FaultProxy) -> None:
    with connect(fault_proxy.dsn_for(fault_db), autocommit=True) as conn:
        # Counted per connection from its start, so allow what startup already used.
        fault_proxy.limit_data(fault_proxy.bytes_downstream + 1000, direction="downstream")
        assert conn.execute("SELECT 1").fetchone() == (1,)
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT repeat('x', 100000)").fetchone()


def test_cut_after_marker_autocommit_statement_commits_but_client_fails(
    fault_db: str, fault_proxy: FaultProxy
) -> None:
    make_job_table(fault_db)
    dsn = fault_proxy.dsn_for(fault_db)
    fault_proxy.cut_after_marker(MARKER)
    with connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT 1")  # unmarked traffic is untouched
        with pytest.raises(psycopg.OperationalError):
            conn.execute(
                f"UPDATE job SET state = 'succeeded' WHERE id = %s {MARKER.decode()}", (1,)
            )
    assert fault_proxy.wait_for_cut(5)
    assert fault_proxy.cuts == 1
    assert job_state(fault_db) == "succeeded"  # the server committed what the client lost


def test_cut_after_marker_explicit_transaction_loses_the_commit_reply(
    fault_db: str, fault_proxy: FaultProxy
) -> None:
    make_job_table(fault_db)
    dsn = fault_proxy.dsn_for(fault_db)
    fault_proxy.cut_after_marker(MARKER, times=1)
    with connect(dsn) as conn:
        # Inside the transaction replies still flow, so the client gets to send COMMIT.
        cur = conn.execute(f"UPDATE job SET state = 'succeeded' WHERE id = 1 {MARKER.decode()}")
        assert cur.rowcount == 1
        with pytest.raises(psycopg.OperationalError):
            conn.commit()
    assert job_state(fault_db) == "succeeded"
    # One-shot: a reconnecting client may run the same marked statement normally.
    with connect(dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE job SET state = 'done' WHERE id = 1 {MARKER.decode()}")
    assert job_state(fault_db) == "done"
    assert fault_proxy.cuts == 1


def test_crash_restart_keeps_committed_data(fault_pg: PgCluster, fault_db: str) -> None:
    make_job_table(fault_db)
    pid_before = fault_pg.postmaster_pid
    open_tx = connect(fault_db)
    try:
        open_tx.execute("INSERT INTO job VALUES (2, 'uncommitted')")
        fault_pg.crash_restart()
        with pytest.raises(psycopg.OperationalError):
            open_tx.execute("SELECT 1")
    finally:
        open_tx.close()
    assert fault_pg.postmaster_pid != pid_before
    assert "database system was interrupted" in fault_pg.log_text()
    with connect(fault_db, autocommit=True) as conn:
        assert conn.execute("SELECT id, state FROM job ORDER BY id").fetchall() == [(1, "running")]


def test_pgbouncer_transaction_mode_round_trips(
    fault_db: str, pgbouncer_proxy: Callable[[str], PgBouncer]
) -> None:
    make_job_table(fault_db)
    bouncer = pgbouncer_proxy(conninfo_to_dict(fault_db)["dbname"])
    # PgBouncer 1.18 can't route prepared statements in transaction mode.
    with connect(bouncer.url(), autocommit=True, prepare_threshold=None) as conn:
        for state in ("claimed", "succeeded"):
            with conn.transaction():
                conn.execute("UPDATE job SET state = %s WHERE id = 1", (state,))
            assert conn.execute("SELECT state FROM job WHERE id = 1").fetchone() == (state,)
    assert job_state(fault_db) == "succeeded"
    with connect(bouncer.admin_dsn(), autocommit=True, cursor_factory=psycopg.ClientCursor) as adm:
        cur = adm.execute("SHOW POOLS")
        columns = [c.name for c in cur.description or ()]
        pools = [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]
    mine = [p for p in pools if p["database"] == bouncer.dbname]
    assert mine and mine[0]["pool_mode"] == "transaction"
