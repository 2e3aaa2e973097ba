"""The job history's admin: read-only list and search, replay back to live as a POST
with CSRF and the replay permission."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from django_pgqueue import history
from django_pgqueue.db import connect
from django_pgqueue.models import Job, JobHistory, Status

from .conftest import _staff, csrf_client, csrf_token

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("clean_history")]

CHANGELIST = "admin:django_pgqueue_jobhistory_changelist"


@pytest.fixture
def in_history(make_job):
    job = make_job(Status.DEAD, task_path="testproject.demo.tasks.fail_always")
    with connect("test-mover") as conn:
        assert history.move_finished(conn, delay=0).moved == 1
    return job


def test_history_is_listed_searched_and_read_only(in_history):
    client = csrf_client(_staff("viewer", "view_jobhistory"))
    page = client.get(reverse(CHANGELIST)).content.decode()
    assert f"#{in_history.pk}" in page or str(in_history.pk) in page
    found = client.get(reverse(CHANGELIST), {"q": "fail_always"}).content.decode()
    assert "fail_always" in found
    by_id = client.get(reverse(CHANGELIST), {"q": str(in_history.pk)})
    assert by_id.status_code == 200 and "fail_always" in by_id.content.decode()
    detail = client.get(reverse("admin:django_pgqueue_jobhistory_change", args=[in_history.pk]))
    assert detail.status_code == 200 and b"fail_always" in detail.content
    assert b'name="_save"' not in detail.content  # no form to edit it
    assert client.get(reverse("admin:django_pgqueue_jobhistory_add")).status_code == 403


def test_replay_from_history_needs_post_csrf_and_the_permission(in_history):
    url = reverse("admin:pgqueue_job_history_replay", args=(in_history.pk,))
    viewer = csrf_client(_staff("viewer", "view_jobhistory"))
    token = csrf_token(viewer, reverse(CHANGELIST))
    assert viewer.get(url).status_code == 403
    assert viewer.post(url, {"csrfmiddlewaretoken": token}).status_code == 403
    assert JobHistory.objects.filter(pk=in_history.pk).exists()

    operator = csrf_client(_staff("operator", "view_jobhistory", "replay_job"))
    assert operator.get(url).status_code == 200  # the confirmation page
    assert JobHistory.objects.filter(pk=in_history.pk).exists()
    assert operator.post(url).status_code == 403  # no CSRF token
    token = operator.cookies["csrftoken"].value
    assert operator.post(url, {"csrfmiddlewaretoken": token}).status_code == 302
    assert not JobHistory.objects.filter(pk=in_history.pk).exists()
    assert Job.objects.get(pk=in_history.pk).status == Status.PENDING
    assert "dead -> pending" in LogEntry.objects.get(object_id=str(in_history.pk)).change_message


def test_bulk_replay_from_history(in_history):
    operator = csrf_client(_staff("operator", "view_jobhistory", "replay_job"))
    token = csrf_token(operator, reverse(CHANGELIST))
    response = operator.post(
        reverse(CHANGELIST),
        {
            "action": "replay",
            "_selected_action": [str(in_history.pk)],
            "post": "yes",
            "csrfmiddlewaretoken": token,
        },
    )
    assert response.status_code == 302
    assert Job.objects.get(pk=in_history.pk).status == Status.PENDING


def _messages(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def test_a_moved_jobs_page_leads_to_its_history_row(in_history):
    """A finished job leaves the live table after HISTORY_DELAY_SECONDS: its old URL
    (from a log line, a bookmark, the list a minute ago) opens its history row instead
    of Django's "doesn't exist. Perhaps it was deleted?"."""
    live = reverse("admin:django_pgqueue_job_change", args=[in_history.pk])
    moved = reverse("admin:django_pgqueue_jobhistory_change", args=[in_history.pk])
    client = csrf_client(_staff("viewer", "view_job", "view_jobhistory"))
    response = client.get(live, follow=True)
    assert response.redirect_chain == [(moved, 302)]
    assert response.status_code == 200 and b"fail_always" in response.content
    assert _messages(response) == [
        f"Job {in_history.pk} has finished and was moved to the job history."
    ]


def test_a_moved_job_seen_without_the_history_permission_says_where_it_went(in_history):
    live = reverse("admin:django_pgqueue_job_change", args=[in_history.pk])
    response = csrf_client(_staff("viewer", "view_job")).get(live, follow=True)
    assert response.redirect_chain == [(reverse("admin:index"), 302)]
    assert _messages(response) == [
        f"Job {in_history.pk} has finished and was moved to the job history, "
        "which you do not have permission to view."
    ]


def test_a_job_that_is_nowhere_is_reported_as_missing(in_history):
    missing = reverse("admin:django_pgqueue_job_change", args=[in_history.pk + 1000])
    response = csrf_client(_staff("viewer", "view_job", "view_jobhistory")).get(
        missing, follow=True
    )
    assert response.redirect_chain == [(reverse("admin:index"), 302)]
    assert "Perhaps it was deleted?" in _messages(response)[0]


def test_the_dead_letter_queue_links_the_dead_jobs_already_in_the_history(in_history):
    """The DLQ (the job list filtered on dead) holds only the dead jobs not yet moved;
    its page links the rest, in the history, with the same filter."""
    client = csrf_client(_staff("viewer", "view_job", "view_jobhistory"))
    page = client.get(reverse("admin:django_pgqueue_job_changelist"), {"status": "dead"})
    history_dead = reverse(CHANGELIST) + "?status=dead"
    assert f'href="{history_dead}"' in page.content.decode()
    listed = client.get(history_dead).content.decode()
    assert "fail_always" in listed
    # Unfiltered, or filtered on a state that is never moved, the list links nothing.
    for params in ({}, {"status": "pending"}):
        page = client.get(reverse("admin:django_pgqueue_job_changelist"), params)
        assert reverse(CHANGELIST) + "?status=" not in page.content.decode()
