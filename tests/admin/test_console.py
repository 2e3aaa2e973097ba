"""The console's layout and display: Django 6's breadcrumb markup, the index layout,
one date and duration format, one dead column, fresh archive sizes, parked deliveries,
endpoints named by id and application, and the message browser's JSON, confirmation
step and move-back offered only on dead-letter queues."""

from __future__ import annotations

import datetime as dt
import io
import re

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from django_pgqueue import mq
from django_pgqueue.admin.display import duration, when
from django_pgqueue.models import Status
from django_pgqueue.models.webhooks import Application, Endpoint
from django_pgqueue.sql import PARKED_AT

from .conftest import _staff, csrf_client, csrf_token

DASHBOARD = "admin:django_pgqueue_job_dashboard"


def messages_url(name: str) -> str:
    return reverse("admin:django_pgqueue_messagequeue_messages", args=[name])


@pytest.fixture
def mq_operator(db):
    return csrf_client(
        _staff(
            "console_op",
            "view_messagequeue",
            "operate_messagequeue",
            "view_job",
            "replay_job",
            "view_delivery",
        )
    )


@pytest.fixture
def queues(db):
    mq.create("console_dead")
    mq.create("console_work", max_reads=1, dead_letter="console_dead")
    mq.send("console_work", {"order": [1, 2], "paid": True, "note": None})
    return "console_work"


# ----- breadcrumbs and the index ------------------------------------------------------


def test_custom_pages_use_the_breadcrumb_markup_of_django_6(queues, mq_operator, make_job):
    make_job(Status.DEAD)
    listing = mq_operator.get(reverse("admin:django_pgqueue_job_changelist")).content.decode()
    confirm = re.search(r'class="button pgq-action[^"]*" href="([^"]+)"', listing).group(1)
    pages = [reverse(DASHBOARD), messages_url(queues), confirm.replace("&amp;", "&")]
    for url in pages:
        text = mq_operator.get(url).content.decode()
        assert '<div class="breadcrumbs">' not in text, url
        nav = re.search(
            r'<nav aria-label="Breadcrumbs">\s*<ol class="breadcrumbs">(.*?)</ol>', text, re.S
        )
        assert nav, url
        assert '<li aria-current="page">' in nav.group(1), url
    css = mq_operator.get(pages[0]).content.decode()
    assert "django_pgqueue/admin.css" in css  # styles ol.breadcrumbs on Django 5.2 too


def test_the_queues_box_is_in_the_app_list_so_recent_actions_stays_beside_it(mq_operator):
    text = mq_operator.get(reverse("admin:index")).content.decode()
    main = text.index('id="content-main"')
    box = text.index('id="pgqueue-module"')
    related = text.index('id="content-related"')
    first_app = text.index("app-django_pgqueue")
    assert main < box < first_app < related


# ----- one formatter for dates and durations -------------------------------------------


def test_one_formatter_for_dates_and_durations():
    moment = dt.datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=dt.UTC)
    assert str(when(moment)) == (
        '<time class="pgq-when" datetime="2026-03-04T05:06:07+00:00">2026-03-04 05:06:07 UTC</time>'
    )
    assert duration(dt.timedelta(seconds=44.6)) == "45 s"
    assert duration(125) == "2 min 5 s"
    assert duration(dt.timedelta(hours=3, minutes=20, seconds=9)) == "3 h 20 min"
    assert duration(dt.timedelta(days=2, hours=4)) == "2 d 4 h"
    assert duration(None) == "—"


def test_lists_and_dashboard_show_seconds_never_microseconds_or_raw_timedeltas(
    mq_operator, make_job
):
    make_job(Status.PENDING, next_attempt_at=timezone.now() - dt.timedelta(minutes=3))
    listing = mq_operator.get(reverse("admin:django_pgqueue_job_changelist")).content.decode()
    assert re.search(r'class="pgq-when"[^>]*>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC<', listing)
    dashboard = mq_operator.get(reverse(DASHBOARD)).content.decode()
    assert re.search(r">3 min( \d+ s)?<", dashboard), "oldest due as a duration"
    for text in (listing, dashboard):
        assert not re.search(r"\d\d:\d\d:\d\d\.\d{6}", text)  # no microseconds
        assert not re.search(r">\d+:\d\d:\d\d", text)  # no raw timedelta


# ----- the dashboard's numbers ----------------------------------------------------------


def test_the_dashboard_has_one_dead_column(mq_operator, make_job):
    make_job(Status.DEAD)
    text = mq_operator.get(reverse(DASHBOARD)).content.decode()
    header = re.search(r'id="pgq-queues">\s*<thead>(.*?)</thead>', text, re.S).group(1)
    labels = re.findall(r"<th[^>]*>([^<]*)</th>", header)
    assert [label for label in labels if "Dead" in label or "DLQ" in label] == ["Dead (DLQ)"]
    row = re.search(r'id="pgq-queues">.*?<tbody>(.*?)</tbody>', text, re.S).group(1)
    assert row.count("<td") == len(labels) - 1  # one cell per column, the name is a th


def test_archived_count_shows_a_fresh_archive(queues, mq_operator):
    ids = [mq.send(queues, {"n": n}) for n in range(3)]
    mq.archive(queues, ids[:2])
    (row,) = [r for r in mq_operator_rows(mq_operator) if r.startswith(queues)]
    assert row.split("|")[4] == "2", row
    listing = mq_operator.get(reverse("admin:django_pgqueue_messagequeue_changelist"))
    assert re.search(r'field-archive_size">2<', listing.content.decode())


def mq_operator_rows(client) -> list[str]:
    text = client.get(reverse(DASHBOARD)).content.decode()
    body = re.search(r'id="pgq-message-queues">.*?<tbody>(.*?)</tbody>', text, re.S).group(1)
    rows = []
    for tr in re.findall(r"<tr>(.*?)</tr>", body, re.S):
        cells = [
            re.sub(r"<[^>]+>", "", c).strip()
            for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", tr, re.S)
        ]
        rows.append("|".join(cells))
    return rows


def test_a_parked_delivery_is_shown_as_parked(mq_operator, make_delivery):
    endpoint = Endpoint.objects.create(url="https://hooks.example.com/off", is_active=False)
    parked = make_delivery(Status.PENDING, endpoint=endpoint, next_attempt_at=PARKED_AT)
    waiting = make_delivery(Status.PENDING)
    listing = mq_operator.get(reverse("admin:django_pgqueue_delivery_changelist")).content.decode()
    assert listing.count("pgq-status-parked") == 1
    detail = mq_operator.get(reverse("admin:django_pgqueue_delivery_change", args=[parked.pk]))
    assert "pgq-status-parked" in detail.content.decode()
    other = mq_operator.get(reverse("admin:django_pgqueue_delivery_change", args=[waiting.pk]))
    assert "pgq-status-parked" not in other.content.decode()


def test_endpoints_with_one_url_are_told_apart_by_id_and_application(mq_operator, make_delivery):
    app = Application.objects.create(uid="cust_42", name="Customer 42")
    url = "https://hooks.example.com/same"
    ours = Endpoint.objects.create(url=url, application=app)
    global_one = Endpoint.objects.create(url=url)
    make_delivery(Status.DEAD, endpoint=ours)
    make_delivery(Status.DEAD, endpoint=global_one)
    for page in (reverse("admin:django_pgqueue_delivery_changelist"), reverse(DASHBOARD)):
        text = mq_operator.get(page).content.decode()
        assert f"#{ours.pk} {url} · cust_42" in text, page
        assert f"#{global_one.pk} {url} · global" in text, page
    listing = mq_operator.get(reverse("admin:django_pgqueue_delivery_changelist")).content
    # <nav> on Django 5.2, <search> on 6.x
    filters = r'<(nav|search) id="changelist-filter".*?</\1>'
    choices = re.search(filters, listing.decode(), re.S).group(0)
    for endpoint, app in ((ours, "cust_42"), (global_one, "global")):
        assert f"endpoint__id__exact={endpoint.pk}" in choices
        assert choices.count(f"#{endpoint.pk} {url} · {app}") == 1, "the filter names it too"
    out = io.StringIO()
    call_command("pgqueue_status", stdout=out, stderr=io.StringIO())
    assert f"{url} (cust_42)" in out.getvalue() and f"{url} (global)" in out.getvalue()


# ----- the message browser --------------------------------------------------------------


def test_the_message_browser_shows_json_not_python_reprs(queues, mq_operator):
    text = mq_operator.get(messages_url(queues)).content.decode()
    assert "&quot;paid&quot;: true" in text and "&quot;note&quot;: null" in text
    assert "True" not in text.split('id="pgq-messages"')[1].split("</table>")[0]
    assert "&#x27;paid&#x27;" not in text


def test_delete_and_archive_ask_for_confirmation_first(queues, mq_operator):
    (msg_id,) = [row[0] for row in mq.store.browse(queues)]
    token = csrf_token(mq_operator, messages_url(queues))
    for operation in ("delete", "archive"):
        page = mq_operator.post(
            messages_url(queues),
            {"operation": operation, "msg_id": [msg_id], "csrfmiddlewaretoken": token},
        )
        assert page.status_code == 200
        text = page.content.decode()
        assert 'name="confirm" value="yes"' in text and "csrfmiddlewaretoken" in text
        assert mq.metrics(queues).queue_length == 1  # nothing done yet
    done = mq_operator.post(
        messages_url(queues),
        {
            "operation": "archive",
            "msg_id": [msg_id],
            "csrfmiddlewaretoken": token,
            "confirm": "yes",
        },
    )
    assert done.status_code == 302
    assert mq.metrics(queues).queue_length == 0


def test_move_back_is_offered_only_on_a_dead_letter_queue(queues, mq_operator):
    work = mq_operator.get(messages_url(queues)).content.decode()
    assert 'value="move_back"' not in work
    mq.read(queues, vt=0)
    mq.read(queues, vt=0)  # -> a dead letter in console_dead
    dead = mq_operator.get(messages_url("console_dead")).content.decode()
    assert 'value="move_back"' in dead
    token = csrf_token(mq_operator, messages_url(queues))
    (msg_id,) = [row[0] for row in mq.store.browse("console_dead")]
    refused = mq_operator.post(
        messages_url(queues),
        {
            "operation": "move_back",
            "msg_id": [msg_id],
            "csrfmiddlewaretoken": token,
            "confirm": "yes",
        },
    )
    assert refused.status_code == 400
    assert "no queue's dead-letter queue" in refused.content.decode()


def test_detail_pages_and_every_list_show_dates_in_the_one_format(mq_operator, make_delivery):
    """Not only the columns we wrote: each date field of each page goes through when()."""
    delivery = make_delivery(Status.DEAD, finished_at=timezone.now())
    pages = [
        reverse("admin:django_pgqueue_delivery_change", args=[delivery.pk]),
        reverse("admin:django_pgqueue_delivery_changelist"),
    ]
    for url in pages:
        text = mq_operator.get(url).content.decode()
        assert 'class="pgq-when"' in text, url
        assert not re.search(
            r"\d{1,2}:\d\d (a\.m\.|p\.m\.)|\b(a\.m\.|p\.m\.|noon|midnight)\b", text
        ), url
    detail = mq_operator.get(pages[0]).content.decode()
    assert re.search(r'field-finished_at_when">.*?class="pgq-when"', detail, re.S)
