"""Changelists stay bounded in queries on big lists; the dashboard is one query per table
(jobs, deliveries, workers) and shows the right numbers."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_pgqueue.admin.paginator import EstimatedCountPaginator
from django_pgqueue.models import Job, Status

from .conftest import csrf_client


def _changelist_queries(client, url):
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200
    return [q["sql"] for q in ctx.captured_queries]


@pytest.mark.parametrize("url_suffix", ["", "?status=dead", "?q=add"])
def test_job_changelist_query_count_does_not_grow_with_rows(url_suffix, operator, make_job):
    client = csrf_client(operator)
    url = reverse("admin:django_pgqueue_job_changelist") + url_suffix
    for _ in range(55):
        make_job(Status.DEAD)
    small = _changelist_queries(client, url)
    for _ in range(60):
        make_job(Status.DEAD)
    large = _changelist_queries(client, url)
    assert len(large) == len(small) <= 12, large


def test_delivery_changelist_has_no_n_plus_one(
    webhook_operator, make_delivery, django_assert_max_num_queries
):
    from django_pgqueue.models.webhooks import Endpoint

    client = csrf_client(webhook_operator)
    endpoints = [Endpoint.objects.create(url=f"https://hooks.example.com/{n}") for n in range(5)]
    for n in range(60):
        make_delivery(Status.DEAD, endpoint=endpoints[n % 5])
    with django_assert_max_num_queries(14):
        response = client.get(reverse("admin:django_pgqueue_delivery_changelist"))
    assert response.status_code == 200
    assert response.content.count(b"pgq-row-actions") == 50


def test_big_tables_are_counted_by_estimate(operator, make_job, monkeypatch):
    client = csrf_client(operator)
    for _ in range(30):
        make_job(Status.SUCCEEDED)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pgqueue_job")
    monkeypatch.setattr(EstimatedCountPaginator, "exact_below", 10)
    queries = _changelist_queries(client, reverse("admin:django_pgqueue_job_changelist"))
    assert any("pgqueue:estimated_rows" in q for q in queries)
    assert not any("COUNT(*)" in q.upper() for q in queries), queries
    filtered = _changelist_queries(
        client, reverse("admin:django_pgqueue_job_changelist") + "?status=succeeded"
    )
    assert any(q.startswith("EXPLAIN") for q in filtered)


def test_dashboard_counts_in_one_query_per_table(webhook_operator, make_job, make_delivery):
    from django_pgqueue.models.webhooks import BreakerState, Endpoint

    for status in (Status.PENDING, Status.DEAD, Status.DEAD, Status.IN_PROGRESS):
        make_job(status, queue_name="emails")
    make_job(Status.PENDING)
    broken = Endpoint.objects.create(url="https://hooks.example.com/broken", is_active=False)
    make_delivery(Status.DEAD, endpoint=broken)
    Endpoint.objects.filter(pk=broken.pk).update(breaker_state=BreakerState.CLOSED)
    client = csrf_client(webhook_operator)
    with CaptureQueriesContext(connection) as ctx:
        page = client.get(reverse("admin:django_pgqueue_job_dashboard"))
    html = page.content.decode()
    assert page.status_code == 200
    assert sum("pgqueue:overview" in q["sql"] for q in ctx.captured_queries) == 1
    assert sum("pgqueue:delivery_overview" in q["sql"] for q in ctx.captured_queries) == 1
    assert sum("pgqueue:workers" in q["sql"] for q in ctx.captured_queries) == 1
    # The charts add one rollup read per kind (queues, endpoints, applications) and
    # the application filter's list (tests/admin/test_charts_dashboard.py).
    charts = [q for q in ctx.captured_queries if "pgqueue:rollup_read" in q["sql"]]
    assert len(charts) == 3
    # The finished jobs moved to the history table: one more table, one more query.
    assert sum("pgqueue:history_counts" in q["sql"] for q in ctx.captured_queries) == 1
    assert len(ctx.captured_queries) <= 8 + len(charts) + 1
    assert "queue_name=emails&amp;status=dead" in html
    assert "Endpoints not delivering" in html and "hooks.example.com/broken" in html
    index = client.get(reverse("admin:index")).content.decode()
    assert reverse("admin:django_pgqueue_job_dashboard") in index


def test_dashboard_needs_view_permission(db):
    from django.contrib.auth.models import User

    staff = User.objects.create_user("nobody", password="pw", is_staff=True)
    client = csrf_client(staff)
    assert client.get(reverse("admin:django_pgqueue_job_dashboard")).status_code == 403
    assert Job.objects.count() == 0


def test_dashboard_lists_workers_and_marks_gone_ones(operator):
    from datetime import timedelta

    from django.utils import timezone

    from django_pgqueue.models import WorkerHeartbeat

    now = timezone.now()
    for worker_id, seen in (("w-alive", now), ("w-gone", now - timedelta(minutes=10))):
        WorkerHeartbeat.objects.create(
            worker_id=worker_id,
            host="box",
            pid=7,
            version="1.0",
            queues=[],
            concurrency=4,
            started_at=now - timedelta(hours=1),
            last_seen_at=seen,
        )
    html = csrf_client(operator).get(reverse("admin:django_pgqueue_job_dashboard")).content.decode()
    assert 'id="pgq-workers"' in html
    alive = html[html.index("w-alive") :]
    gone = html[html.index("w-gone") :]
    assert "alive" in alive[: alive.index("</tr>")]
    assert "gone" in gone[: gone.index("</tr>")]


def _row_cells(html: str, table_id: str, name: str) -> list[str]:
    """The text of each cell of the row headed ``name`` in table ``table_id``."""
    table = html[html.index(f'id="{table_id}"') :]
    table = table[: table.index("</table>")]
    for row in re.findall(r"<tr>(.*?)</tr>", table, flags=re.S):
        head = re.search(r"<th scope=\"row\">(.*?)</th>", row, flags=re.S)
        if head and re.sub(r"<[^>]+>", "", head.group(1)).strip() == name:
            cells = re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)
            return [re.sub(r"<[^>]+>", "", cell).strip() for cell in cells]
    raise AssertionError(f"no row {name!r} in #{table_id}")


def test_dashboard_numbers_per_queue(operator, make_job):
    """Counts by state, the oldest due job's age, in flight, stuck and dead, per queue,
    as computed and as shown (the page renders in the test's transaction, whose now()
    is when it began: the ages below are read against that)."""
    now = timezone.now()
    for due_at in (now - timedelta(hours=1), now - timedelta(minutes=5)):
        make_job(Status.PENDING, queue_name="reports", next_attempt_at=due_at)
    make_job(Status.PENDING, queue_name="reports", next_attempt_at=now + timedelta(hours=1))
    make_job(Status.FAILED, queue_name="reports")  # its retry is an hour away: deferred
    make_job(Status.IN_PROGRESS, queue_name="reports")
    make_job(Status.IN_PROGRESS, queue_name="reports", locked_until=now - timedelta(minutes=10))
    for _ in range(3):
        make_job(Status.DEAD, queue_name="reports")
    for _ in range(2):
        make_job(Status.SUCCEEDED, queue_name="reports")
    make_job(Status.PENDING, queue_name="other", next_attempt_at=now - timedelta(days=2))

    page = csrf_client(operator).get(reverse("admin:django_pgqueue_job_dashboard"))
    assert page.status_code == 200
    stats = {row["stats"].name: row["stats"] for row in page.context["queues"]}
    reports = stats["reports"]
    assert reports.counts == {"pending": 3, "failed": 1, "in_progress": 2, "dead": 3,
                              "succeeded": 2}  # fmt: skip
    assert (reports.due, reports.deferred) == (2, 2)
    assert (reports.in_flight, reports.lapsed, reports.dead) == (2, 1, 3)
    age = reports.oldest_due_age.total_seconds()
    assert 3540 < age <= 3600, age  # the hour-old job, not the other queue's
    assert 2 * 86400 - 60 < stats["other"].oldest_due_age.total_seconds() <= 2 * 86400

    cells = _row_cells(page.content.decode(), "pgq-queues", "reports")
    # waiting (workflow steps), pending, in progress, failed, dead, succeeded, cancelled,
    # oldest, in flight, stuck
    assert cells[:7] == ["0", "3", "2", "1", "3", "2", "0"]
    assert cells[7].startswith("59 min") or cells[7] == "1 h", cells[7]
    assert cells[8:] == ["2", "1"]


def test_dashboard_endpoint_numbers_and_open_circuits(webhook_operator, make_delivery):
    from django_pgqueue.models.webhooks import BreakerState, Endpoint

    now = timezone.now()
    healthy = Endpoint.objects.create(url="https://hooks.example.com/healthy")
    tripped = Endpoint.objects.create(
        url="https://hooks.example.com/tripped",
        breaker_state=BreakerState.OPEN,
        open_until=now + timedelta(minutes=10),
    )
    disabled = Endpoint.objects.create(url="https://hooks.example.com/off", is_active=False)
    make_delivery(Status.SUCCEEDED, endpoint=healthy)
    for _ in range(2):
        make_delivery(Status.PENDING, endpoint=tripped, next_attempt_at=now - timedelta(hours=2))
    make_delivery(Status.DEAD, endpoint=tripped)

    page = csrf_client(webhook_operator).get(reverse("admin:django_pgqueue_job_dashboard"))
    assert page.status_code == 200
    stats = {row["stats"].endpoint_id: row["stats"] for row in page.context["endpoints"]}
    assert stats[tripped.pk].counts == {"pending": 2, "dead": 1}
    assert 2 * 3600 - 60 < stats[tripped.pk].oldest_due_age.total_seconds() <= 2 * 3600
    assert stats[healthy.pk].counts == {"succeeded": 1}
    assert stats[disabled.pk].counts == {} and stats[disabled.pk].oldest_due_age is None
    attention = [s.endpoint_id for _, group in page.context["attention"] for s in group]
    assert sorted(attention) == sorted([tripped.pk, disabled.pk])
    html = page.content.decode()
    attention_html = html[html.index('id="pgq-attention"') :]
    attention_html = attention_html[: attention_html.index("</div>")]
    assert attention_html.count("circuit open") == 1
    assert attention_html.count(">disabled<") == 1
    assert "hooks.example.com/healthy" not in attention_html
    cells = _row_cells(
        html, "pgq-endpoints", f"#{tripped.pk} https://hooks.example.com/tripped · global"
    )
    # The first column counts waiting workflow steps: a delivery never waits.
    assert cells[:7] == ["0", "2", "0", "0", "1", "0", "0"] and cells[8:] == ["0", "0"]
