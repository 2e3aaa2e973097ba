"""Smoke run of ``manage.py pgqueue_bench`` at its smallest sizes (numbers not checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection

from django_pgqueue.bench.core import WORKLOADS, Bench
from django_pgqueue.bench.rows import fmt, pctl
from django_pgqueue.models import Job
from testproject.demo import tasks

#: The rows (workload, words of the config) by which each workload shows in the results.
EVIDENCE = {
    "enqueue": ("enqueue", ""),
    "drain": ("drain", ""),
    "latency": ("wake-up latency", ""),
    "pickup": ("steady-rate pickup", "offered"),
    "webhooks": ("webhooks", ""),
    "fairness": ("webhooks", "one slow"),
    "claim_cost": ("claim cost", ""),
    "notify": ("enqueue + NOTIFY", ""),
    "mq": ("message queues", ""),
    "tenant_fanout": ("tenant fan-out", ""),
    "ingest": ("ingest", "keep-alive clients"),
    "relay": ("relay", "relay to NATS JetStream"),
    "workflows": ("workflows", "chains"),
    "rollup": ("rollup", "batches of 50"),
}


def test_fmt_and_percentiles():
    assert fmt([]) == "-"
    assert fmt([1500.0, 1000.0, 2000.0]) == "1,500 (1,000-2,000)"
    assert fmt([2.5]) == "2.50"
    values = sorted(float(v) for v in range(1, 101))
    assert pctl(values, 50) == 50.0
    assert pctl(values, 95) == 95.0
    assert pctl(values, 100) == 100.0


def test_unknown_workload_is_refused(transactional_db):
    with pytest.raises(ValueError, match="unknown workload"):
        Bench(only=["nope"])


# The relay workload alone starts six burst workers (about 45 s on a loaded 2-core machine).
@pytest.mark.timeout(420)
def test_smallest_run_covers_every_workload(transactional_db, tmp_path, capsys):
    name = connection.settings_dict["NAME"]
    out = tmp_path / "bench.json"
    call_command(
        "pgqueue_bench",
        "--repeat=1",
        "--n-single=20",
        "--n-many=50",
        "--n-drain=200",
        "--concurrency=1,2",
        "--probes=3",
        "--pickup-rate=50",
        "--pickup-seconds=1",
        "--history=2000",
        "--claims=2",
        "--n-notify=16",
        "--producers=2",
        "--n-webhooks=5",
        "--fair-events=1",
        "--applications=50",
        "--n-ingest=8",
        "--ingest-clients=2",
        "--ingest-workers=1",
        f"--json={out}",
    )
    printed = capsys.readouterr().out
    assert "| workload |" in printed
    data = json.loads(out.read_text())
    workloads = {row["workload"] for row in data["rows"]}
    assert {"enqueue", "raw ceiling", "drain", "wake-up latency", "claim cost"} <= workloads
    assert "enqueue + NOTIFY" in workloads and "tenant fan-out" in workloads
    assert "ingest" in workloads
    for row in data["rows"]:
        assert row["values"], row
        assert all(v > 0 for v in row["values"]), row
    # The scratch database is gone and Django points at the test database again.
    assert connection.settings_dict["NAME"] == name
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [f"{name}_bench"])
        assert cur.fetchone()[0] == 0
    # Every workload the command knows left its rows (a new one must be added here).
    assert set(EVIDENCE) == set(WORKLOADS)
    for name, (workload, words) in EVIDENCE.items():
        configs = [row["config"] for row in data["rows"] if row["workload"] == workload]
        assert any(words in config for config in configs), (name, configs)
    configs = [row["config"] for row in data["rows"] if row["workload"] == "webhooks"]
    assert any("one slow" in c and "p99" in c for c in configs), configs


@pytest.mark.timeout(120)
def test_ingest_posts_events_through_a_real_server_beside_the_ceiling(transactional_db, tmp_path):
    """The ingest rows: the API and the bare view each measured at each client count,
    and both really wrote their events (a failed request fails the run)."""
    out = tmp_path / "bench.json"
    call_command(
        "pgqueue_bench",
        "--only=ingest",
        "--repeat=2",
        "--n-ingest=12",
        "--ingest-clients=1,3",
        "--ingest-workers=2",
        f"--json={out}",
    )
    rows = json.loads(out.read_text())["rows"]
    assert [(r["workload"], r["unit"]) for r in rows] == [
        ("ingest", unit) for _ in (1, 3) for unit in ("events/s", "ms", "ms")
    ]
    for row in rows:
        assert len(row["values"]) == len(row["reference_values"]) == 2, row
        assert all(v > 0 for v in row["values"] + row["reference_values"]), row
    assert rows[0]["target"] == "≥ 80% of ceiling" and rows[0]["ratio"] > 0
    assert "1 keep-alive clients" in rows[0]["config"] and "3 keep-alive" in rows[3]["config"]


#: pgmq's SQL-only install, the yardstick beside the repository (scripts/pgmq_client_suite.sh).
PGMQ_PEER_DIR = Path(__file__).resolve().parents[2] / "shared" / "bench-peers" / "pgmq"
PGMQ_SQL = Path(os.environ.get("PGMQ_PEER_DIR") or PGMQ_PEER_DIR) / "pgmq.sql"


@pytest.mark.timeout(120)
def test_pickup_beside_pgmq_measures_the_real_pgmq_in_the_same_shape(transactional_db, tmp_path):
    if not PGMQ_SQL.is_file():
        pytest.skip(f"no pgmq SQL install file at {PGMQ_SQL} (set PGMQ_PEER_DIR)")
    out = tmp_path / "bench.json"
    call_command(
        "pgqueue_bench",
        "--only=pickup",
        "--repeat=1",
        "--pickup-rate=50",
        "--pickup-seconds=1.5",
        f"--pgmq-sql={PGMQ_SQL}",
        "--pgmq-poll-ms=5",
        f"--json={out}",
    )
    rows = json.loads(out.read_text())["rows"]
    beside = [r for r in rows if r["reference"].startswith("pgmq read_with_poll every 5 ms")]
    assert [r["config"].split(",")[0] for r in beside] == ["p50", "p99", "consumer CPU per job"]
    for row in beside:
        assert len(row["values"]) == len(row["reference_values"]) == 1, row
        assert all(v > 0 for v in row["values"] + row["reference_values"]), row


def test_pgmq_sql_must_name_a_file_and_go_with_pickup(transactional_db, tmp_path):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no such file"):
        call_command("pgqueue_bench", "--only=pickup", f"--pgmq-sql={tmp_path / 'none.sql'}")
    sql_file = tmp_path / "pgmq.sql"
    sql_file.write_text("SELECT 1;")
    with pytest.raises(CommandError, match="add it to --only"):
        call_command("pgqueue_bench", "--only=drain", f"--pgmq-sql={sql_file}")


def test_a_child_whose_connections_reach_another_database_refuses(transactional_db, tmp_path):
    """A project naming its database in OPTIONS (libpq prefers it to NAME): a benchmark
    child pointed at the scratch database by NAME would reach the real one. It must
    refuse before it runs anything: the job due in the real database stays pending."""
    real = connection.settings_dict["NAME"]
    due = tasks.noop.enqueue()
    (tmp_path / "options_dbname_settings.py").write_text(
        "from testproject.settings import *\n"
        "DATABASES['default']['OPTIONS'] = {\n"
        f"    **DATABASES['default'].get('OPTIONS', {{}}), 'dbname': {real!r}\n"
        "}\n"
    )
    root = Path(__file__).resolve().parent.parent
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "options_dbname_settings",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)]),
    }
    scratch = f"{real}_bench"
    argv = ["runworkers", "--burst", "--skip-checks"]
    child = subprocess.run(
        [sys.executable, "-m", "django_pgqueue.bench", "default", scratch, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == 1, child.stderr
    assert f"reaches database {real!r}" in child.stderr, child.stderr
    assert f"not the benchmark's scratch database {scratch!r}" in child.stderr
    assert Job.objects.get(pk=due.id).status == "pending"


def test_the_runtime_does_not_import_the_benchmark():
    """The benchmark ships as a command: nothing a running project loads imports it."""
    code = (
        "import sys, django\n"
        "django.setup()\n"
        "from django.core.management import call_command\n"
        "call_command('check', verbosity=0)\n"
        "import django_pgqueue.backend, django_pgqueue.worker.worker, django_pgqueue.admin\n"
        "import django_pgqueue.management.commands.runworkers\n"
        "print(sorted(m for m in sys.modules if m.startswith('django_pgqueue.bench')))\n"
    )
    root = Path(__file__).resolve().parent.parent
    child = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip().splitlines()[-1] == "[]"
