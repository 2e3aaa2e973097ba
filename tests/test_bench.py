"""Smoke run of ``manage.py pgqueue_bench`` at its smallest sizes (numbers not checked)."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.db import connection

from django_pgqueue.bench.core import WORKLOADS, Bench, fmt, pctl


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


@pytest.mark.timeout(300)
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
    assert set(WORKLOADS) >= {"enqueue", "drain", "latency", "webhooks", "claim_cost", "notify"}
    assert "fairness" in WORKLOADS
    configs = {row["config"] for row in data["rows"] if row["workload"] == "webhooks"}
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
