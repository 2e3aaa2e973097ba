"""Errors in the admin say when they are history: a succeeded job's last error is from an
earlier attempt, and a delivery's page shows its history once, from the attempt log."""

from __future__ import annotations

from django.urls import reverse
from django.utils import timezone

from django_pgqueue.models import Status

from .conftest import csrf_client


def test_a_succeeded_jobs_error_is_labelled_as_from_an_earlier_attempt(operator, make_job):
    job = make_job(Status.SUCCEEDED, attempts=2, last_error="ValueError: flaky the first time")
    client = csrf_client(operator)
    page = client.get(reverse("admin:django_pgqueue_job_change", args=(job.pk,))).content.decode()
    assert "From an earlier attempt: the row is succeeded now." in page
    listing = client.get(reverse("admin:django_pgqueue_job_changelist")).content.decode()
    assert "(earlier attempt) ValueError: flaky the first time" in listing


def test_a_dead_jobs_error_is_its_current_one(operator, make_job):
    job = make_job(Status.DEAD)
    page = csrf_client(operator).get(reverse("admin:django_pgqueue_job_change", args=(job.pk,)))
    html = page.content.decode()
    assert "order 7 has an invalid address" in html and "From an earlier attempt" not in html


def test_a_delivery_page_shows_its_history_once_from_the_attempt_log(
    webhook_operator, make_delivery
):
    from django_pgqueue.models.webhooks import DeliveryAttempt

    delivery = make_delivery(Status.FAILED, last_error="attempt 3: refused: nope")
    for n in (1, 2, 3):
        DeliveryAttempt.objects.create(
            delivery=delivery, attempt=n, started_at=timezone.now(), error=f"refusal {n}"
        )
    page = csrf_client(webhook_operator).get(
        reverse("admin:django_pgqueue_delivery_change", args=(delivery.pk,))
    )
    html = page.content.decode()
    assert "No errors recorded" not in html and "error history" not in html.lower()
    assert all(f"refusal {n}" in html for n in (1, 2, 3))


def test_a_job_whose_stored_json_python_cannot_decode_is_shown_not_a_500(operator):
    """A row written past enqueue() with arguments nested beyond Python's recursion
    limit: the list and the job's page show it, naming the problem."""
    from ..faults.test_bad_input import UNDECODABLE_ARGS, plant_job

    bad = plant_job(UNDECODABLE_ARGS["deep"])
    client = csrf_client(operator)
    page = client.get(reverse("admin:django_pgqueue_job_change", args=(bad,)))
    assert page.status_code == 200
    assert "stored JSON Python cannot decode: RecursionError" in page.content.decode()
    listing = client.get(reverse("admin:django_pgqueue_job_changelist"))
    assert listing.status_code == 200 and f">{bad}<" in listing.content.decode()


def test_a_job_whose_error_history_is_no_list_is_shown_not_a_500(operator):
    """A dead job whose error history someone wrote by SQL as a number: its page shows
    the history's problem where the attempts would be."""
    from django.db import connection

    from testproject.demo import tasks

    dead = int(tasks.add.enqueue(1, 3).id)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgqueue_job SET status = 'dead', finished_at = now(), errors = '42'"
            " WHERE id = %s",
            [dead],
        )
    page = csrf_client(operator).get(reverse("admin:django_pgqueue_job_change", args=(dead,)))
    assert page.status_code == 200
    assert "the stored error history is not a list: 42" in page.content.decode()


def test_an_event_whose_payload_python_cannot_decode_is_shown_not_a_500(webhook_operator):
    """An event written past send_event() with a payload nested beyond Python's
    recursion limit: its page shows it, naming the problem."""
    from django.db import connection

    from ..faults.test_bad_input import UNDECODABLE_ARGS

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_event (event_type, payload, body, msg_id, created_at)"
            f" VALUES ('order.paid', {UNDECODABLE_ARGS['deep']}, '{{}}', 'msg_deep', now())"
            " RETURNING id"
        )
        (event_id,) = cursor.fetchone()
    page = csrf_client(webhook_operator).get(
        reverse("admin:django_pgqueue_event_change", args=(event_id,))
    )
    assert page.status_code == 200
    assert "stored JSON Python cannot decode: RecursionError" in page.content.decode()


def test_an_endpoint_whose_headers_python_cannot_decode_opens_and_says_what_to_fix(
    webhook_operator,
):
    """An endpoint row written past the doors, its headers nested beyond Python's
    recursion limit: its page opens with the problem named (the form then refuses the
    marker as headers, "custom headers must be a mapping", until they are fixed)."""
    from django.db import connection

    from django_pgqueue.models import Endpoint

    from ..faults.test_bad_input import UNDECODABLE_ARGS

    endpoint = Endpoint(url="https://hooks.example.com/deep")
    endpoint.save()
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE pgqueue_endpoint SET headers = {UNDECODABLE_ARGS['deep']} WHERE id = %s",
            [endpoint.pk],
        )
    client = csrf_client(webhook_operator)
    url = reverse("admin:django_pgqueue_endpoint_change", args=(endpoint.pk,))
    page = client.get(url)
    assert page.status_code == 200
    assert "stored JSON Python cannot decode: RecursionError" in page.content.decode()
