"""Job progress: reported by a running task, throttled, the last value always kept,
shown by get_result and the admin."""

from __future__ import annotations

import pytest
from django.test import override_settings
from django.urls import reverse

from django_pgqueue.models import Job
from testproject.demo import tasks

pytestmark = pytest.mark.django_db(transaction=True)


@override_settings(PGQUEUE={"PROGRESS_INTERVAL_SECONDS": 3600})
def test_progress_is_throttled_and_the_last_report_is_written_at_the_end(run_worker):
    steps = [[0.1, "1 of 10"], [0.5, "5 of 10"], [0.9, "9 of 10"]]
    result = tasks.report_progress.enqueue(steps)
    run_worker(burst=True)
    fetched = tasks.report_progress.get_result(result.id)
    # The first report is written at once; the next two within the interval wait...
    assert fetched.return_value == [[0.1, "1 of 10"], [0.1, "1 of 10"], [0.1, "1 of 10"]]
    # ...and the latest is written when the task returns, before its outcome.
    assert fetched.metadata["progress"] == 0.9
    assert fetched.metadata["progress_message"] == "9 of 10"
    assert fetched.metadata["progress_at"] is not None


@override_settings(PGQUEUE={"PROGRESS_INTERVAL_SECONDS": 0})
def test_with_no_interval_every_report_is_written(run_worker):
    result = tasks.report_progress.enqueue([[0.25, "a"], [0.75, "b"]])
    run_worker(burst=True)
    assert tasks.report_progress.get_result(result.id).return_value == [
        [0.25, "a"],
        [0.75, "b"],
    ]


def test_a_job_that_never_reports_has_no_progress_metadata(run_worker):
    result = tasks.add.enqueue(1, 2)
    run_worker(burst=True)
    assert tasks.add.get_result(result.id).metadata == {}


def test_bad_values_are_refused_with_the_value_named(run_worker):
    result = tasks.refuse_bad_progress.enqueue()
    run_worker(burst=True)
    errors = tasks.refuse_bad_progress.get_result(result.id).return_value
    assert errors == [
        "ValueError: set_progress takes a fraction from 0 to 1, got 1.5",
        "ValueError: set_progress takes a fraction from 0 to 1, got -0.1",
        "ValueError: set_progress takes a fraction from 0 to 1, got nan",
        "ValueError: set_progress takes a fraction from 0 to 1, got True",
        "ValueError: set_progress takes a fraction from 0 to 1, got 'half'",
        "TypeError: set_progress's message must be a str, got int",
    ]
    assert Job.objects.get(pk=int(result.id)).progress is None  # nothing half-written


def test_a_nul_in_the_message_is_stored_visibly(run_worker):
    result = tasks.report_progress.enqueue([[0.5, "a{NUL}b"]])
    run_worker(burst=True)
    assert tasks.report_progress.get_result(result.id).metadata["progress_message"] == "a\\x00b"


def test_the_admin_shows_progress_in_the_list_and_on_the_job_page(run_worker, admin_client):
    result = tasks.report_progress.enqueue([[0.4, "4 of 10 pages"]])
    run_worker(burst=True)
    listing = admin_client.get(reverse("admin:django_pgqueue_job_changelist")).content.decode()
    assert '<progress value="0.400" max="1" aria-label="40 %">40 %</progress> 40 %' in listing
    assert 'title="4 of 10 pages"' in listing  # the message, as the bar's tooltip
    page = admin_client.get(
        reverse("admin:django_pgqueue_job_change", args=[int(result.id)])
    ).content.decode()
    assert "40 % · 4 of 10 pages" in page
