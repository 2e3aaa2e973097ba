"""The dashboard's message-queue charts: drawn from the minutes the maintenance
thread's sampler wrote, per queue, readable without colour, and safe with any
query string."""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET

import pytest
from django.db import connection
from django.urls import reverse

from django_pgqueue import mq
from django_pgqueue.db import connect
from django_pgqueue.rollup import store as rollup_store

from ..admin.conftest import _staff, csrf_client

pytestmark = pytest.mark.django_db(transaction=True)

DASHBOARD = "admin:django_pgqueue_job_dashboard"
SVG = "{http://www.w3.org/2000/svg}"


def _mq_section(html: str) -> str:
    start = html.index('id="pgq-mq-charts"')
    return html[start : html.index('<div class="module', start)]


def _figures(section: str) -> list[ET.Element]:
    figures = section.split('<figure class="pgq-figure">')[1:]
    return [ET.fromstring(f[: f.index("</svg>") + 6]) for f in figures]


def test_message_queue_charts_from_the_sampler():
    """Two minutes sampled by the maintenance thread's sampler, sends, deletes and
    archives done through the Python API in between: the dashboard charts them, a
    line per queue told apart by dash pattern and legend, not colour alone."""
    mq.create("orders")
    mq.create("emails")
    with connect("maintenance") as conn:
        minute = conn.execute("SELECT date_trunc('minute', now())").fetchone()[0]
        rollup_store.sample_message_queues(conn, minute - dt.timedelta(minutes=1))
        ids = mq.send_batch("orders", [{"n": n} for n in range(6)])
        mq.delete("orders", ids[:2])
        mq.archive("orders", ids[2])
        mq.send("emails", {"to": "a@example.com"})
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_force_next_flush()")
        rollup_store.sample_message_queues(conn, minute)
    viewer = csrf_client(_staff("mq_charts", "view_job", "view_messagequeue"))
    page = viewer.get(reverse(DASHBOARD))
    assert page.status_code == 200
    section = _mq_section(page.content.decode())
    charts = _figures(section)
    titles = [c.find(f"{SVG}title").text for c in charts]
    assert titles == [
        "Messages sent (per minute)",
        "Messages settled (deleted or archived) (per minute)",
        "Messages archived (per minute)",
        "Depth (messages visible) (per minute)",
    ]
    descs = [c.find(f"{SVG}desc").text for c in charts]
    assert descs[0] == "orders: latest 6, highest 6; emails: latest 1, highest 1"
    assert descs[1].startswith("orders: latest 3, highest 3")
    assert descs[2].startswith("orders: latest 1, highest 1")
    assert descs[3] == "orders: latest 3, highest 3; emails: latest 1, highest 1"
    # Readable without colour: each line its own dash pattern and a legend naming it.
    samples = [line for line in charts[0].iter(f"{SVG}line") if line.get("stroke-width") == "2"]
    assert len({line.get("stroke-dasharray") for line in samples}) == len(samples) == 2
    legend = [t.text or "" for t in charts[0].iter(f"{SVG}text")]
    assert any(t.startswith("orders: ") for t in legend)
    assert any(t.startswith("emails: ") for t in legend)

    one = _mq_section(viewer.get(reverse(DASHBOARD), {"mq": "emails"}).content.decode())
    assert _figures(one)[0].find(f"{SVG}desc").text == "emails: latest 1, highest 1"
    assert '<option value="emails" selected>' in one
    day = _mq_section(viewer.get(reverse(DASHBOARD), {"window": "day"}).content.decode())
    assert "Messages sent (per 10 minutes)" in day


@pytest.mark.parametrize("value", ["x" * 5000, "a\x00b", "<b>", "1abc"])
def test_a_refused_message_queue_filter_says_why(value):
    viewer = csrf_client(_staff("mq_charts", "view_job", "view_messagequeue"))
    page = viewer.get(reverse(DASHBOARD), {"mq": value})
    assert page.status_code == 200
    section = _mq_section(page.content.decode())
    assert "Message queue filter ignored: not a message queue name" in section
    assert "<b>" not in section


def test_message_queue_charts_need_the_view_permission():
    page = csrf_client(_staff("jobs_only", "view_job")).get(reverse(DASHBOARD))
    assert page.status_code == 200
    assert 'id="pgq-mq-charts"' not in page.content.decode()
