"""The dashboard's charts: drawn from the rollup a real worker wrote, for the last
hour or day, per queue, and safe with any query string."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from testproject.demo import tasks

from .conftest import csrf_client

pytestmark = pytest.mark.django_db(transaction=True)

DASHBOARD = "admin:django_pgqueue_job_dashboard"
SVG = "{http://www.w3.org/2000/svg}"


def _charts(html: str) -> list[ET.Element]:
    start = html.index('<div class="pgq-charts">')
    end = html.index("</div>", start)
    block = html[start:end].replace('<div class="pgq-charts">', "")
    figures = block.split('<figure class="pgq-figure">')[1:]
    return [ET.fromstring(f[: f.index("</svg>") + 6]) for f in figures]


def _room_in_this_minute(seconds: float = 25.0) -> None:
    """Wait, if need be, for a database minute with ``seconds`` left in it. The rollup
    counts by the database's minute and a chart's latest point is the minute of the
    read: a run that crosses into the next minute reads "latest 0" for work it did."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT extract(second FROM clock_timestamp())")
        second = float(cursor.fetchone()[0])
    if second > 60.0 - seconds:
        time.sleep(60.0 - second + 0.2)


def test_the_dashboard_charts_what_the_worker_did(operator, run_worker):
    _room_in_this_minute()
    for i in range(4):
        tasks.add.enqueue(i, 1)
    tasks.send_receipt.enqueue(1)
    run_worker(burst=True)
    client = csrf_client(operator)
    page = client.get(reverse(DASHBOARD))
    assert page.status_code == 200
    charts = _charts(page.content.decode())
    titles = [c.find(f"{SVG}title").text for c in charts]
    assert titles == [
        "Jobs succeeded (per minute)",
        "Attempts failed (retried or dead) (per minute)",
        "p95 wait, due to start",
        "p95 run time",
        "Depth (jobs waiting) (per minute)",
    ]
    succeeded = charts[0].find(f"{SVG}desc").text
    assert "default: latest 4, highest 4" in succeeded
    assert "emails: latest 1, highest 1" in succeeded
    assert "no data" not in charts[3].find(f"{SVG}desc").text  # run times were counted

    day = client.get(reverse(DASHBOARD), {"window": "day"}).content.decode()
    assert "(per 10 minutes)" in day
    one = client.get(reverse(DASHBOARD), {"queue": "emails"}).content.decode()
    desc = _charts(one)[0].find(f"{SVG}desc").text
    assert desc == "emails: latest 1, highest 1"


def test_the_charts_cost_one_query_whatever_the_history(operator, run_worker):
    client = csrf_client(operator)
    client.get(reverse(DASHBOARD))
    with CaptureQueriesContext(connection) as before:
        client.get(reverse(DASHBOARD))
    for i in range(20):
        tasks.add.enqueue(i, 1)
    run_worker(burst=True)
    with CaptureQueriesContext(connection) as after:
        client.get(reverse(DASHBOARD))
    rollup_reads = [q for q in after.captured_queries if "pgqueue:rollup_read" in q["sql"]]
    assert len(rollup_reads) == 1
    assert len(after.captured_queries) == len(before.captured_queries)


@pytest.mark.parametrize(
    "query",
    [
        {"window": "week"},
        {"window": "\x00"},
        {"queue": "x" * 5000},
        {"queue": "a\x00b"},
        {"queue": "<b>"},
    ],
)
def test_any_query_string_gets_a_page_not_an_error(operator, query):
    page = csrf_client(operator).get(reverse(DASHBOARD), query)
    assert page.status_code == 200
    assert b"<b>" not in page.content.split(b'id="pgq-charts"')[1].split(b"</div>")[0]


def test_a_refused_queue_filter_says_why(operator):
    page = csrf_client(operator).get(reverse(DASHBOARD), {"queue": "a\x00b"})
    assert "Queue filter ignored: not a queue name" in page.content.decode()


def _delivery_section(html: str) -> str:
    start = html.index('id="pgq-delivery-charts"')
    return html[start : html.index('<div class="module', start)]


def test_delivery_charts_per_endpoint_and_application_with_a_filter(webhook_operator):
    from django.utils import timezone

    from django_pgqueue.models import Application, Endpoint, Rollup

    a = Application.objects.create(uid="cust_a")
    b = Application.objects.create(uid="cust_b")
    ea = Endpoint.objects.create(url="https://a.example/hook", application=a)
    eb = Endpoint.objects.create(url="https://a.example/hook", application=b)
    minute = timezone.now().replace(second=0, microsecond=0)
    hist = [0] * 21
    hist[7] = 4
    for kind, name, ok, failed in (
        ("endpoint", str(ea.id), 3, 1),
        ("endpoint", str(eb.id), 8, 0),
        ("application", "cust_a", 3, 1),
        ("application", "cust_b", 8, 0),
    ):
        Rollup.objects.create(
            kind=kind, name=name, minute=minute, ok=ok, failed=failed, run_hist=hist
        )
    client = csrf_client(webhook_operator)
    html = client.get(reverse(DASHBOARD)).content.decode()
    section = _delivery_section(html)
    assert f"#{ea.id} https://a.example/hook · cust_a: latest 4" in section
    assert f"#{eb.id} https://a.example/hook · cust_b: latest 8" in section
    assert "cust_a: latest 25 %" in section  # failure rate, in words
    assert "p95 latency" in section and "250 ms" in section
    only_a = client.get(reverse(DASHBOARD), {"application": "cust_a"}).content.decode()
    section = _delivery_section(only_a)
    assert f"#{ea.id} https" in section and f"#{eb.id} https" not in section
    assert "cust_b: latest" not in section
