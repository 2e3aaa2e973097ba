"""Job operator actions: bulk actions and row buttons, CSRF, permissions, audit log."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.messages import get_messages
from django.urls import reverse

from django_pgqueue.models import Job, Status

from .conftest import csrf_token

CHANGELIST = "admin:django_pgqueue_job_changelist"

#: operation -> (a state it changes, the state it leaves the row in)
CASES = {
    "replay": (Status.DEAD, Status.PENDING),
    "retry_now": (Status.FAILED, Status.FAILED),
    "cancel": (Status.PENDING, Status.CANCELLED),
    "move_to_dlq": (Status.FAILED, Status.DEAD),
    "abort": (Status.PENDING, Status.CANCELLED),
}


def bulk_post(client, ids, action, token=None, confirm=True):
    data = {"action": action, "_selected_action": [str(i) for i in ids]}
    if confirm:
        data["post"] = "yes"
    else:
        data["index"] = "0"
    if token:
        data["csrfmiddlewaretoken"] = token
    return client.post(reverse(CHANGELIST), data)


def row_url(operation, pk):
    return reverse(f"admin:pgqueue_job_{operation}", args=(pk,))


def reload(job):
    job.refresh_from_db()
    return job


@pytest.mark.parametrize("operation", list(CASES))
def test_bulk_action_confirms_then_acts_and_logs(operation, operator_client, operator, make_job):
    before, after = CASES[operation]
    job = make_job(before)
    old_due = job.next_attempt_at
    token = csrf_token(operator_client, reverse(CHANGELIST))

    # The first POST (from the changelist's action menu) only shows a confirmation.
    response = bulk_post(operator_client, [job.pk], operation, token, confirm=False)
    assert response.status_code == 200
    assert b'name="post" value="yes"' in response.content
    assert reload(job).status == before
    assert reload(job).next_attempt_at == old_due

    # The confirmation without its CSRF token is refused.
    assert bulk_post(operator_client, [job.pk], operation).status_code == 403
    assert reload(job).status == before

    response = bulk_post(operator_client, [job.pk], operation, token)
    assert response.status_code == 302
    job = reload(job)
    assert job.status == after
    if operation == "retry_now":
        assert job.next_attempt_at < old_due
    if operation == "replay":
        assert job.attempts == 0 and job.errors  # history kept
    entry = LogEntry.objects.get(object_id=str(job.pk))
    assert entry.user == operator
    assert entry.action_flag == CHANGE
    assert f"{before} -> {after}" in entry.change_message
    texts = [str(m) for m in get_messages(response.wsgi_request)]
    assert any(": 1 job." in t for t in texts), texts


@pytest.mark.parametrize("operation", list(CASES))
def test_row_button_get_confirms_post_acts(operation, operator_client, operator, make_job):
    before, after = CASES[operation]
    job = make_job(before)
    url = row_url(operation, job.pk)

    response = operator_client.get(url)  # what the button link does
    assert response.status_code == 200
    assert b"csrfmiddlewaretoken" in response.content
    assert reload(job).status == before and not LogEntry.objects.exists()

    assert operator_client.post(url).status_code == 403  # no CSRF token
    assert reload(job).status == before

    token = operator_client.cookies["csrftoken"].value
    response = operator_client.post(url, {"csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert reload(job).status == after
    entry = LogEntry.objects.get(object_id=str(job.pk))
    assert entry.user == operator and f"{before} -> {after}" in entry.change_message


@pytest.mark.parametrize("operation", list(CASES))
def test_without_permission_actions_hidden_and_refused(operation, viewer_client, make_job):
    before, _after = CASES[operation]
    job = make_job(before)
    token = csrf_token(viewer_client, reverse(CHANGELIST))
    page = viewer_client.get(reverse(CHANGELIST)).content.decode()
    assert f'value="{operation}"' not in page  # not in the action menu
    assert row_url(operation, job.pk) not in page  # no row button
    detail = viewer_client.get(reverse("admin:django_pgqueue_job_change", args=(job.pk,)))
    assert detail.status_code == 200
    assert row_url(operation, job.pk) not in detail.content.decode()

    assert bulk_post(viewer_client, [job.pk], operation, token).status_code == 403
    assert bulk_post(viewer_client, [job.pk], operation, token, confirm=False).status_code == 403
    assert viewer_client.get(row_url(operation, job.pk)).status_code == 403
    response = viewer_client.post(row_url(operation, job.pk), {"csrfmiddlewaretoken": token})
    assert response.status_code == 403
    assert reload(job).status == before
    assert not LogEntry.objects.exists()


def test_rows_held_by_a_worker_are_skipped_with_reason(operator_client, make_job):
    held = make_job(Status.IN_PROGRESS)
    dead = make_job(Status.DEAD)
    done = make_job(Status.SUCCEEDED)
    token = csrf_token(operator_client, reverse(CHANGELIST))

    confirm = bulk_post(operator_client, [held.pk, dead.pk], "cancel", token, confirm=False)
    assert b"will be skipped" in confirm.content.lower()

    response = bulk_post(operator_client, [held.pk, dead.pk, done.pk], "replay", token)
    assert reload(held).status == Status.IN_PROGRESS
    assert reload(held).locked_until is not None
    assert reload(dead).status == Status.PENDING
    assert reload(done).status == Status.PENDING
    texts = [str(m) for m in get_messages(response.wsgi_request)]
    assert any("Replayed: 2 jobs." in t for t in texts), texts
    assert any(f"1 held by a worker (in progress): #{held.pk}" in t for t in texts), texts
    assert LogEntry.objects.count() == 2

    for operation in ("cancel", "move_to_dlq", "retry_now"):
        url = row_url(operation, held.pk)
        operator_client.post(url, {"csrfmiddlewaretoken": token})
        assert reload(held).status == Status.IN_PROGRESS


def test_double_submitted_replay_replays_once(operator_client, make_job):
    job = make_job(Status.DEAD)
    url = row_url("replay", job.pk)
    token = csrf_token(operator_client, url)
    operator_client.post(url, {"csrfmiddlewaretoken": token})
    response = operator_client.post(url, {"csrfmiddlewaretoken": token})
    assert reload(job).status == Status.PENDING
    assert LogEntry.objects.count() == 1
    texts = [str(m) for m in get_messages(response.wsgi_request)]
    assert any("is pending" in t for t in texts), texts


def test_row_action_redirects_only_to_local_next(operator_client, make_job):
    job = make_job(Status.DEAD)
    url = row_url("replay", job.pk)
    token = csrf_token(operator_client, url)
    response = operator_client.post(
        url, {"csrfmiddlewaretoken": token, "next": "https://evil.example/"}
    )
    assert response["Location"] == reverse(CHANGELIST)
    job2 = make_job(Status.DEAD)
    local = reverse(CHANGELIST) + "?status=dead"
    response = operator_client.post(
        row_url("replay", job2.pk), {"csrfmiddlewaretoken": token, "next": local}
    )
    assert response["Location"] == local


def test_row_buttons_follow_the_row_state(operator_client, make_job):
    dead = make_job(Status.DEAD)
    held = make_job(Status.IN_PROGRESS)
    page = operator_client.get(reverse(CHANGELIST)).content.decode()
    assert row_url("replay", dead.pk) in page
    assert row_url("cancel", dead.pk) not in page
    for operation in CASES:
        # Only abort applies to a row a worker holds.
        assert (row_url(operation, held.pk) in page) == (operation == "abort")


def test_other_methods_are_not_allowed(operator_client, make_job):
    job = make_job(Status.DEAD)
    assert operator_client.put(row_url("replay", job.pk)).status_code in (403, 405)
    assert reload(job).status == Status.DEAD


def test_job_is_read_only(operator_client, make_job):
    job = make_job(Status.DEAD)
    detail = operator_client.get(reverse("admin:django_pgqueue_job_change", args=(job.pk,)))
    assert detail.status_code == 200
    assert b'name="_save"' not in detail.content
    assert operator_client.get(reverse("admin:django_pgqueue_job_add")).status_code == 403
    assert Job.objects.count() == 1


def test_abort_flags_a_running_job_for_its_worker(operator_client, operator, make_job):
    held = make_job(Status.IN_PROGRESS)
    url = row_url("abort", held.pk)
    page = operator_client.get(reverse("admin:django_pgqueue_job_change", args=(held.pk,)))
    assert url in page.content.decode()  # offered on a running job, unlike cancel
    assert row_url("cancel", held.pk) not in page.content.decode()
    operator_client.get(url)
    token = operator_client.cookies["csrftoken"].value
    response = operator_client.post(url, {"csrfmiddlewaretoken": token})
    assert response.status_code == 302
    held = reload(held)
    # Still held: the worker ends the attempt itself, as cancelled.
    assert held.status == Status.IN_PROGRESS and held.locked_until is not None
    assert held.abort_requested_at is not None
    entry = LogEntry.objects.get(object_id=str(held.pk))
    assert entry.user == operator and "Abort: in_progress" in entry.change_message
