"""Flow control of job queues in the claim: pause, global and per-key concurrency,
fair share across keys, rate limits; and the bad input the store refuses.

The claims here are the worker's own statement on the worker's own connections;
tests/worker/test_flow_control_processes.py runs real worker processes.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from django.db import connection

from django_pgqueue import queues, sql
from django_pgqueue.compat import InvalidTask
from django_pgqueue.db import connect
from django_pgqueue.jobs import store
from django_pgqueue.models import Job, Queue
from testproject.demo import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def _params(limit: int = 10) -> dict[str, Any]:
    return {"all_queues": True, "queues": [], "limit": limit, "lease": 30.0, "worker_id": "t"}


def claim(limit: int = 10) -> list[Any]:
    with connect("flow-test") as conn:
        return store.claim(conn, _params(limit))


def enqueue(n: int, queue: str = "default", key: str | None = None) -> None:
    task = tasks.noop.using(queue_name=queue)
    if key is not None:
        task = task.using(concurrency_key=key)
    for _ in range(n):
        task.enqueue()


def finish(job_ids: list[int]) -> None:
    Job.objects.filter(pk__in=job_ids).update(
        status="succeeded", locked_until=None, finished_at="2026-01-01T00:00:00Z"
    )


def test_a_paused_queue_is_not_claimed_and_resumes():
    enqueue(3, "reports")
    enqueue(2, "default")
    queues.pause("reports")
    claimed = claim()
    assert Counter(j.queue_name for j in claimed) == {"default": 2}
    assert queues.get("reports").paused
    assert queues.resume("reports") is True
    assert Counter(j.queue_name for j in claim()) == {"reports": 3}
    assert queues.resume("reports") is False


def test_global_concurrency_is_counted_from_running_rows():
    queues.configure("reports", concurrency=3)
    enqueue(10, "reports")
    enqueue(4, "default")
    first = claim(limit=20)
    assert Counter(j.queue_name for j in first) == {"reports": 3, "default": 4}
    assert claim() == []  # three running: the queue is full
    finish([j.id for j in first if j.queue_name == "reports"][:2])
    again = claim()
    assert [j.queue_name for j in again] == ["reports", "reports"]
    over = Job.objects.filter(queue_name="reports", status="pending")
    assert over.count() == 5 and {j.attempts for j in over} == {0}  # no attempt spent


def test_key_concurrency_and_round_robin_over_keys():
    queues.configure("tenants", key_concurrency=2)
    enqueue(50, "tenants", key="big")
    enqueue(1, "tenants", key="small")
    enqueue(2, "tenants")  # no key: only the queue's limits apply
    claimed = claim(limit=4)
    keys = Counter(Job.objects.get(pk=j.id).concurrency_key for j in claimed)
    # Round robin: each key's first job before any key's second.
    assert keys == {"big": 1, "small": 1, None: 2} or keys == {"big": 2, "small": 1, None: 1}
    claimed += claim(limit=50)
    keys = Counter(Job.objects.get(pk=j.id).concurrency_key for j in claimed)
    assert keys == {"big": 2, "small": 1, None: 2}


def test_a_lone_key_fills_the_batch():
    queues.configure("tenants", concurrency=100)
    enqueue(20, "tenants", key="only")
    assert len(claim(limit=8)) == 8


def test_rate_limit_holds_and_spends_no_attempt():
    queues.configure("payments", rate_limit=5, rate_period=60)
    enqueue(12, "payments")
    assert len(claim()) == 5
    assert claim() == []
    assert Job.objects.filter(status="pending", attempts=0).count() == 7


def test_unconfigured_queues_claim_as_before():
    queues.configure("other", concurrency=1)  # a limited queue elsewhere changes nothing here
    enqueue(12)
    assert len(claim()) == 10


def test_atomic_claim_honours_the_limit():
    queues.configure("default", concurrency=1)
    for n in range(3):
        tasks.record_atomic.enqueue(str(n))
    with connect("flow-test") as conn:
        assert len(store.claim_atomic(conn, _params())) == 1
        assert store.claim_atomic(conn, _params()) == []


def test_until_empty_does_not_wait_for_a_paused_queue():
    enqueue(1, "reports")
    with connect("flow-test") as conn:
        assert store.any_left(conn, _params())
        queues.pause("reports")
        assert not store.any_left(conn, _params())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency": 0}, "concurrency must be between 1"),
        ({"concurrency": -2}, "concurrency must be between 1"),
        ({"key_concurrency": 0}, "key_concurrency must be between 1"),
        ({"rate_limit": -1}, "rate_limit must be between 1"),
        ({"rate_limit": 5, "rate_period": 0}, "rate_period (seconds) must be between 1"),
        ({"concurrency": True}, "concurrency must be an integer"),
        ({"concurrency": "3x"}, "concurrency must be a whole number"),
    ],
)
def test_bad_limits_are_refused_and_nothing_is_written(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        queues.configure("reports", **options)
    assert not Queue.objects.exists()


@pytest.mark.parametrize(
    ("name", "message"),
    [("", "non-empty"), ("x" * 101, "more than the 100"), ("a\x00b", "NUL"), (7, "string")],
)
def test_bad_queue_names_are_refused(name, message):
    for write in (queues.configure, queues.pause):
        with pytest.raises(ValueError, match=message):
            write(name)
    assert not Queue.objects.exists()


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("k" * 201, "more than the 200"),
        ("a\x00b", "NUL"),
        ("", "non-empty"),
        ("\ud800", "surrogate"),
    ],
)
def test_bad_concurrency_keys_are_refused_before_sql(key, message):
    with pytest.raises(InvalidTask, match=message):
        tasks.noop.using(concurrency_key=key).enqueue()
    assert not Job.objects.exists()


def test_the_decorator_gives_a_default_key():
    from django_pgqueue import task

    keyed = task(concurrency_key="nightly")(tasks.noop.func)
    result = keyed.enqueue()
    assert Job.objects.get(pk=result.id).concurrency_key == "nightly"
    result = keyed.using(concurrency_key="customer-42").enqueue()
    assert Job.objects.get(pk=result.id).concurrency_key == "customer-42"


def test_the_claim_walks_keys_without_scanning_the_backlog():
    """1,000 keys waiting, 20 jobs each: the claim reads one index descent per key and
    each key's first rows, never the backlog (no sequential scan of the job table)."""
    queues.configure("tenants", key_concurrency=1)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {sql.JOB_TABLE} (status, priority, attempts, max_attempts,
                next_attempt_at, worker_id, last_error, errors, created_at, updated_at,
                task_path, queue_name, backend, args, kwargs, worker_ids, concurrency_key,
                flow_controlled)
            SELECT 'pending', 0, 0, 3, now(), '', '', '[]', now(), now(),
                   'testproject.demo.tasks.noop', 'tenants', 'default', '[]', '{{}}', '[]',
                   'k' || (g % 1000), true FROM generate_series(1, 20000) AS g"""
        )
        cursor.execute(f"ANALYZE {sql.JOB_TABLE}")
    with connect("flow-test") as conn, conn.transaction():
        before = conn.execute(
            "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'pgqueue_job'"
        ).fetchone()[0]
        claimed = store.claim(conn, _params(limit=50))
        after = conn.execute(
            "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'pgqueue_job'"
        ).fetchone()[0]
    assert len(claimed) == 50
    assert after == before


def test_the_command_configures_lists_pauses_and_resumes():
    from io import StringIO

    from django.core.management import CommandError, call_command

    enqueue(1, "reports")
    out = StringIO()
    call_command("pgqueue_queue", "configure", "reports", "--concurrency", "3", stdout=out)
    call_command("pgqueue_queue", "pause", "reports", stdout=out)
    call_command("pgqueue_queue", "list", stdout=out)
    assert "reports  concurrency=3" in out.getvalue() and "paused since" in out.getvalue()
    call_command("pgqueue_queue", "resume", "reports", stdout=out)
    assert not queues.get("reports").paused
    with pytest.raises(CommandError, match="Unknown queue 'reprots'"):
        call_command("pgqueue_queue", "pause", "reprots")
    with pytest.raises(CommandError, match="must be 1 or more"):
        call_command("pgqueue_queue", "configure", "reports", "--concurrency", "0")
    call_command("pgqueue_queue", "pause", "new", "--create", stdout=out)
    assert set(Queue.objects.values_list("name", flat=True)) == {"reports", "new"}


def test_status_shows_each_paused_queue():
    from django_pgqueue.status import render_text, snapshot

    queues.pause("reports")
    data = snapshot()
    assert [q["name"] for q in data["paused_queues"]] == ["reports"]
    assert "paused: queue 'reports' since" in render_text(data)


def test_the_admin_pauses_and_resumes_with_its_permission(client):
    from django.contrib.admin.models import LogEntry
    from django.contrib.auth.models import Permission, User

    queues.configure("reports", concurrency=2)
    staff = User.objects.create_user("ops", password="pw", is_staff=True)
    staff.user_permissions.add(
        Permission.objects.get(codename="view_queue"),
        Permission.objects.get(codename="pause_queue"),
    )
    client.force_login(staff)
    url = "/admin/django_pgqueue/queue/"
    page = client.get(url)
    assert page.status_code == 200 and b"reports" in page.content
    post = {"action": "pause_queues", "_selected_action": ["reports"]}
    assert client.post(url, post).status_code == 302
    assert queues.get("reports").paused
    assert LogEntry.objects.filter(object_id="reports").count() == 1
    client.post(url, {"action": "resume_queues", "_selected_action": ["reports"]})
    assert not queues.get("reports").paused
    # Without the permission there is no pause action to run.
    staff.user_permissions.remove(Permission.objects.get(codename="pause_queue"))
    client.post(url, post)
    assert not queues.get("reports").paused


def test_the_testing_helper_honours_limits_and_pauses():
    from django_pgqueue.testing import run_queued_jobs

    queues.configure("reports", concurrency=1)
    enqueue(3, "reports")
    enqueue(2, "paused")
    queues.pause("paused")
    run_queued_jobs()
    assert Job.objects.filter(queue_name="reports", status="succeeded").count() == 3
    assert Job.objects.filter(queue_name="paused", status="pending", attempts=0).count() == 2


def test_the_metrics_show_each_paused_queue():
    pytest.importorskip("prometheus_client")
    from django_pgqueue.metrics import _QueueGauges

    queues.pause("reports")
    [paused] = [m for m in _QueueGauges().collect() if m.name == "pgqueue_queue_paused"]
    assert [(s.labels, s.value) for s in paused.samples] == [({"queue": "reports"}, 1.0)]
