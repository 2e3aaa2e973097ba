"""The schedule admin: next and last run shown, pause and resume with permission and audit."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from django_pgqueue.models import Schedule
from django_pgqueue.periodic.scheduler import Scheduler
from django_pgqueue.periodic.spec import ScheduleSpec

from .conftest import _staff, csrf_client, csrf_token

CHANGELIST = "admin:django_pgqueue_schedule_changelist"


@pytest.fixture
def schedule(db: None) -> Schedule:
    now = dt.datetime(2026, 1, 1, 12, 0, 30, tzinfo=dt.UTC)
    clock = {"now": now}
    spec = ScheduleSpec(
        name="nightly-report",
        task_path="testproject.demo.tasks.add",
        cron="0 3 * * *",
        timezone="Europe/Paris",
        args=[1, 2],
    )
    scheduler = Scheduler({spec.name: spec}, clock=lambda: clock["now"])
    scheduler.sync()
    clock["now"] = dt.datetime(2026, 1, 2, 2, 0, 30, tzinfo=dt.UTC)  # past 03:00 Paris
    scheduler.run_pass()
    return Schedule.objects.get(name="nightly-report")


def post_action(client, action, ids):
    token = csrf_token(client, reverse(CHANGELIST))
    return client.post(
        reverse(CHANGELIST),
        {"action": action, "_selected_action": [str(i) for i in ids], "csrfmiddlewaretoken": token},
        follow=True,
    )


def test_changelist_shows_next_and_last_run_and_links_the_job(schedule):
    client = csrf_client(_staff("viewer", "view_schedule"))
    page = client.get(reverse(CHANGELIST)).content.decode()
    assert "nightly-report" in page and "0 3 * * *" in page and "Europe/Paris" in page
    assert schedule.last_tick_at == dt.datetime(2026, 1, 2, 2, 0, tzinfo=dt.UTC)
    assert schedule.next_tick_at == dt.datetime(2026, 1, 3, 2, 0, tzinfo=dt.UTC)
    assert reverse("admin:django_pgqueue_job_change", args=[schedule.last_job_id]) in page
    detail = client.get(reverse("admin:django_pgqueue_schedule_change", args=[schedule.pk]))
    assert detail.status_code == 200
    assert "Pause the selected schedules" not in page  # no permission, no action


def test_pause_and_resume_are_audited_and_need_the_permission(schedule):
    viewer = csrf_client(_staff("viewer", "view_schedule"))
    post_action(viewer, "pause", [schedule.pk])
    schedule.refresh_from_db()
    assert not schedule.paused

    operator = csrf_client(_staff("operator", "view_schedule", "pause_schedule"))
    page = post_action(operator, "pause", [schedule.pk]).content.decode()
    schedule.refresh_from_db()
    assert schedule.paused and "Paused: 1 schedule." in page
    page = post_action(operator, "pause", [schedule.pk]).content.decode()
    assert "Skipped 1: 1 already paused" in page
    post_action(operator, "resume", [schedule.pk])
    schedule.refresh_from_db()
    assert not schedule.paused
    assert list(
        LogEntry.objects.filter(object_id=str(schedule.pk))
        .order_by("pk")
        .values_list("change_message", flat=True)
    ) == ["Paused the schedule", "Resumed the schedule"]


def test_run_now_needs_its_own_permission_csrf_and_leaves_the_cron_alone(schedule):
    from django_pgqueue.models import Job, ScheduleTick

    before = (schedule.next_tick_at, schedule.last_tick_at, schedule.last_job_id)
    ticks = ScheduleTick.objects.count()
    jobs = Job.objects.count()
    for codenames in (("view_schedule",), ("view_schedule", "pause_schedule")):
        post_action(csrf_client(_staff("_".join(codenames), *codenames)), "run_now", [schedule.pk])
    assert Job.objects.count() == jobs  # neither viewing nor pausing is running

    runner = csrf_client(_staff("runner", "view_schedule", "run_schedule"))
    forged = runner.post(
        reverse(CHANGELIST), {"action": "run_now", "_selected_action": [schedule.pk]}
    )
    assert forged.status_code == 403 and Job.objects.count() == jobs  # no CSRF token

    page = post_action(runner, "run_now", [schedule.pk]).content.decode()
    job = Job.objects.latest("pk")
    assert Job.objects.count() == jobs + 1
    assert (job.task_path, job.args) == ("testproject.demo.tasks.add", [1, 2])
    assert "Ran nightly-report now as job" in page
    assert reverse("admin:django_pgqueue_job_change", args=[job.pk]) in page
    assert LogEntry.objects.get(object_id=str(schedule.pk)).change_message == (
        f"Ran the schedule now as job #{job.pk}"
    )
    schedule.refresh_from_db()
    assert (schedule.next_tick_at, schedule.last_tick_at, schedule.last_job_id) == before
    assert ScheduleTick.objects.count() == ticks  # an extra run, not a tick


def test_the_schedule_page_lists_the_next_five_runs_and_offers_run_now(schedule):
    detail_url = reverse("admin:django_pgqueue_schedule_change", args=[schedule.pk])
    viewer = csrf_client(_staff("viewer", "view_schedule")).get(detail_url).content.decode()
    assert 'id="pgq-run-now"' not in viewer
    runs = re.search(r'<ol class="pgq-next-runs">(.*?)</ol>', viewer, re.S).group(1)
    items = re.findall(r"<li>(.*?)</li>", runs, re.S)
    assert len(items) == 5
    assert all(item.endswith("(03:00 Europe/Paris)</span>") for item in items), items
    runner = csrf_client(_staff("runner", "view_schedule", "run_schedule"))
    page = runner.get(detail_url).content.decode()
    form = re.search(r'<form method="post" action="([^"]+)"[^>]*>(.*?)</form>', page, re.S)
    assert 'id="pgq-run-now"' in form.group(2) and "csrfmiddlewaretoken" in form.group(2)
    assert form.group(1) == reverse(CHANGELIST)


def test_the_list_and_page_draw_recent_runs_with_their_outcomes(schedule):
    from django_pgqueue.models import Job, ScheduleTick

    job = Job.objects.get(pk=schedule.last_job_id)
    Job.objects.filter(pk=job.pk).update(status="dead")
    ScheduleTick.objects.create(
        schedule_name=schedule.name, tick_at=dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.UTC)
    )  # an older tick whose job is gone (pruned)
    client = csrf_client(_staff("viewer", "view_schedule"))
    page = client.get(reverse(CHANGELIST)).content.decode()
    svg = page[page.index('<svg xmlns="http://www.w3.org/2000/svg" class="pgq-spark"') :]
    svg = svg[: svg.index("</svg>") + 6]
    assert "<title" in svg and "Last 2 runs of nightly-report" in svg
    assert "1 pruned, 1 dead" in svg  # the <desc>, oldest first
    assert "<title>dead 2026-01-02 02:00:00 UTC</title>" in svg
    detail = client.get(reverse("admin:django_pgqueue_schedule_change", args=[schedule.pk]))
    assert "Last 2 runs of nightly-report" in detail.content.decode()


@pytest.mark.parametrize(
    ("column", "value", "named"),
    [
        ("args", "'42'::jsonb", "['args'] must be a list"),
        ("kwargs", "'[1]'::jsonb", "['kwargs'] must be a dict"),
        ("cron", "'every day'", "['cron']"),
        ("timezone", "'Mars/Base'", "['timezone']"),
        ("task_path", "'nowhere'", "['task']"),
    ],
)
def test_run_now_of_a_row_sql_broke_names_it_and_runs_the_others(schedule, column, value, named):
    """A schedule row someone changed by SQL past the checks a schedule is declared
    by: running it now is refused with those checks' own words, and the other
    schedules selected with it still run (it was a 500 that ran none after it)."""
    from django.db import connection

    from django_pgqueue.models import Job

    good = Schedule.objects.create(
        name="hourly", task_path="testproject.demo.tasks.add", cron="0 * * * *", args=[2, 3]
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE pgqueue_schedule SET {column} = {value} WHERE id = %s", [schedule.pk]
        )
    jobs = Job.objects.count()
    runner = csrf_client(_staff("runner", "view_schedule", "run_schedule"))
    page = post_action(runner, "run_now", [schedule.pk, good.pk])
    assert page.status_code == 200
    html = page.content.decode()
    assert "Did not run nightly-report" in html and named in html.replace("&#x27;", "'"), html
    assert Job.objects.count() == jobs + 1
    assert Job.objects.latest("pk").args == [2, 3]
