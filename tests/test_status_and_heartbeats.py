"""Worker heartbeats (written on the lease cadence over the completer's connection) and
``manage.py pgqueue_status`` (its JSON fields, text and thresholds)."""

from __future__ import annotations

import io
import json
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from django_pgqueue.models import Job, Status, WorkerHeartbeat
from django_pgqueue.stats import worker_overview

from .conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _gone_row(worker_id: str, silent: timedelta) -> WorkerHeartbeat:
    seen = timezone.now() - silent
    return WorkerHeartbeat.objects.create(
        worker_id=worker_id,
        host="elsewhere",
        pid=1,
        version="0.0.1",
        queues=["emails"],
        concurrency=2,
        started_at=seen - timedelta(minutes=5),
        last_seen_at=seen,
    )


def test_a_running_worker_beats_on_its_completer_connection_and_removes_its_row(
    run_worker, settings
):
    settings.PGQUEUE = {**settings.PGQUEUE, "LEASE_SECONDS": 0.6, "POLL_INTERVAL": 0.05}
    _gone_row("crashed-long-ago", timedelta(hours=2))
    _gone_row("crashed-recently", timedelta(minutes=5))
    worker = run_worker(burst=False, queues=["emails", "default"], concurrency=3)
    row = wait_for(
        lambda: WorkerHeartbeat.objects.filter(worker_id=worker.worker_id).first(),
        10,
        "the worker's heartbeat row",
    )
    assert (row.queues, row.concurrency) == (["emails", "default"], 3)
    import os

    from django_pgqueue import __version__

    assert row.pid == os.getpid() and row.version == __version__
    first_seen = row.last_seen_at
    wait_for(
        lambda: WorkerHeartbeat.objects.get(worker_id=worker.worker_id).last_seen_at > first_seen,
        10,
        "a second beat",
    )
    # Pruned by the live worker's beat: the long-gone row only.
    assert not WorkerHeartbeat.objects.filter(worker_id="crashed-long-ago").exists()
    by_id = {w.worker_id: w for w in worker_overview()}
    assert not by_id[worker.worker_id].is_gone and by_id["crashed-recently"].is_gone
    # No connection of its own: the worker's sessions are its claim, completer and
    # LISTEN connections, as before heartbeats.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT application_name FROM pg_stat_activity WHERE application_name LIKE %s",
            [f"%{worker.worker_id}%"],
        )
        names = sorted(name.split("-", 2)[1] for (name,) in cursor.fetchall())
    assert names == sorted(set(names)) and set(names) <= {"worker", "complete", "listen"}
    worker.stop()
    wait_for(
        lambda: not WorkerHeartbeat.objects.filter(worker_id=worker.worker_id).exists(),
        15,
        "the row removed at a clean stop",
    )


def _status(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("pgqueue_status", *args, stdout=out, stderr=io.StringIO())
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue()
    return 0, out.getvalue()


def _job(status: str, queue: str = "default", **fields) -> Job:
    values = {"task_path": "testproject.demo.tasks.add", "args": [1, 2], "status": status}
    values.update(queue_name=queue, **fields)
    return Job.objects.create(**values)


def test_status_json_fields():
    now = timezone.now()
    _job(Status.PENDING, next_attempt_at=now - timedelta(seconds=90))
    _job(Status.PENDING, next_attempt_at=now + timedelta(hours=1))
    _job(Status.FAILED, next_attempt_at=now + timedelta(minutes=5), attempts=1)
    _job(Status.DEAD, finished_at=now, attempts=5)
    import uuid

    _job(
        Status.IN_PROGRESS,
        queue="emails",
        locked_by=uuid.uuid4(),
        locked_until=now - timedelta(seconds=5),
        attempts=1,
    )
    _gone_row("w-gone", timedelta(minutes=10))
    code, out = _status("--json")
    assert code == 0
    data = json.loads(out)
    assert set(data) == {
        "measured_at",
        "queues",
        "endpoints",
        "workers",
        "message_queues",
        "paused_queues",
        "xmin_holders",
        "attempt_log_partitioned_through",
        "warnings",
        "problems",
        "ok",
    }
    queues = {q["name"]: q for q in data["queues"]}
    default = queues["default"]
    assert (default["due"], default["deferred"], default["dead"]) == (1, 2, 1)
    assert default["oldest_due_seconds"] >= 89
    assert (queues["emails"]["lapsed"], queues["emails"]["in_progress"]) == (1, 0)
    [worker] = data["workers"]
    assert worker["worker_id"] == "w-gone" and worker["alive"] is False
    assert worker["queues"] == ["emails"] and worker["seconds_since_seen"] >= 599
    assert data["ok"] is True and data["problems"] == []


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        ("42", ["(stored queues are not a list: 42)"]),
        ('[1, "emails"]', ["1", "emails"]),
        ('{"a": 1}', ['(stored queues are not a list: {"a": 1})']),
    ],
)
def test_a_worker_row_whose_queues_are_no_list_of_names_is_shown(stored, shown):
    """A heartbeat row written by SQL with its queues in another shape: the status
    command (text and JSON) lists the worker, saying so, instead of failing."""
    from django.db import connection

    _gone_row("w-odd", timedelta(minutes=10))
    with connection.cursor() as cursor:
        cursor.execute("UPDATE pgqueue_worker SET queues = %s::jsonb", [stored])
    code, out = _status("--json")
    assert code == 0
    [worker] = json.loads(out)["workers"]
    assert worker["queues"] == shown
    code, out = _status()
    assert code == 0 and "w-odd" in out


def test_thresholds_exit_2_and_name_the_problem():
    _job(Status.PENDING, next_attempt_at=timezone.now() - timedelta(seconds=120))
    _job(Status.DEAD, finished_at=timezone.now(), attempts=5)
    assert _status("--max-oldest-due", "5m", "--max-dead", "1")[0] == 0
    code, out = _status(
        "--json", "--max-oldest-due", "60s", "--max-dead", "0", "--min-workers", "1"
    )
    assert code == 2
    problems = json.loads(out)["problems"]
    assert any("queue 'default'" in p and "--max-oldest-due 60s" in p for p in problems)
    assert "1 row(s) in the dead-letter queue (--max-dead 0)" in problems
    assert any("0 live worker(s)" in p for p in problems)


def test_text_output_has_the_three_tables():
    _job(Status.PENDING)
    code, out = _status()
    assert code == 0
    assert "Queues" in out and "Webhook endpoints" in out and "Workers" in out
    assert "oldest due (s)" in out and "(no workers)" in out


def test_bad_durations_are_named():
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="expected a duration such as 60s, 5m or 1h"):
        call_command("pgqueue_status", "--max-oldest-due", "soon")


def test_watch_prints_one_json_document_per_interval(monkeypatch):
    from django_pgqueue.management.commands import pgqueue_status

    sleeps: list[float] = []

    def sleep(seconds: float) -> None:  # the second interval is "interrupted" (Ctrl-C)
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(pgqueue_status.time, "sleep", sleep)
    _job(Status.PENDING)
    code, out = _status("--json", "--watch", "250ms")
    documents = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(documents) == 2 and sleeps == [0.25, 0.25]
    assert all(d["queues"][0]["due"] == 1 for d in documents)


@pytest.mark.django_db(transaction=True)
def test_status_names_a_session_holding_back_the_xmin_horizon():
    """An idle-in-transaction session with a snapshot keeps every dead row of the queue's
    tables from vacuum: pgqueue_status names it (pid, application_name, state, age)."""
    from django_pgqueue.db import connect

    with connect("test-pin") as pin:
        pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        pin.execute("SELECT count(*) FROM pgqueue_job")  # takes the snapshot
        pid = pin.info.backend_pid
        time.sleep(1.2)
        code, out = _status("--json", "--xmin-warning-age", "1s")
        data = json.loads(out)
        (holder,) = [h for h in data["xmin_holders"] if h["pid"] == pid]
        assert holder["application_name"] == "pgqueue-test-pin"
        assert holder["state"] == "idle in transaction"
        assert holder["age_seconds"] >= 1
        assert any(f"pid {pid}" in w for w in data["warnings"])
        assert code == 0  # a warning, not a problem...
        code, out = _status("--max-xmin-age", "1s")
        assert code == 2  # ...unless asked
        assert f"session pid {pid} (application_name 'pgqueue-test-pin'" in out
        pin.execute("ROLLBACK")
    code, out = _status("--json", "--xmin-warning-age", "1s")
    assert pid not in [h["pid"] for h in json.loads(out)["xmin_holders"]]


def test_status_says_when_the_attempt_log_has_no_partition_for_today():
    """Attempts of a day without a partition cannot be written (there is no DEFAULT
    partition): with the premade days gone, pgqueue_status makes it a problem."""
    from django_pgqueue import history
    from django_pgqueue.db import connect

    code, out = _status("--json")
    data = json.loads(out)
    assert code == 0 and data["attempt_log_partitioned_through"] is not None
    with connect("test-runway") as conn:
        parts = [p for p in history.partitions(conn, history.ATTEMPT_LOG) if p.attached_to]
        for part in parts:
            conn.execute(f"ALTER TABLE pgqueue_delivery_attempt DETACH PARTITION {part.name}")
        try:
            code, out = _status("--json")
            data = json.loads(out)
            assert data["attempt_log_partitioned_through"] is None
            (problem,) = [p for p in data["problems"] if "attempt log" in p]
            assert "partitions for no day" in problem and "start a worker" in problem
            assert code == 2
        finally:
            for part in parts:
                start = "MINVALUE" if part.from_minvalue else f"'{part.day.isoformat()}Z'"
                conn.execute(
                    f"ALTER TABLE pgqueue_delivery_attempt ATTACH PARTITION {part.name}"
                    f" FOR VALUES FROM ({start}) TO ('{part.end.isoformat()}')"
                )
    assert json.loads(_status("--json")[1])["attempt_log_partitioned_through"]
