"""Changelists stay bounded in queries on big lists; the dashboard is one query per table
(jobs, deliveries, workers)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

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
    assert len(ctx.captured_queries) <= 7
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
