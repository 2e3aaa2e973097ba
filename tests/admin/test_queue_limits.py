"""The admin's "Change limits" page of a queue: saved only through queues.configure,
checked by the same rules as the API and the command, POST with CSRF, permission
``change_queue``, audited; a bad value re-renders the form and writes nothing."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.urls import reverse

from django_pgqueue import queues

from .conftest import _staff, csrf_client, csrf_token

pytestmark = pytest.mark.django_db

URL = reverse("admin:django_pgqueue_queue_limits", args=["reports"])
CHANGE = reverse("admin:django_pgqueue_queue_change", args=["reports"])
BLANK = dict.fromkeys(queues.LIMIT_FIELDS, "")


@pytest.fixture
def limits_client(db: None) -> Client:
    return csrf_client(_staff("limiter", "view_queue", "change_queue"))


@pytest.fixture
def reports() -> queues.QueueState:
    queues.configure("reports", concurrency=3)
    queues.reset("reports")  # a row with no run-time change: source is not "run time"
    state = queues.get("reports")
    assert state is not None and state.source != queues.SOURCE_RUN_TIME
    return state


def _post(client: Client, data: dict[str, str]):
    token = csrf_token(client, URL)
    return client.post(URL, {**BLANK, **data, "csrfmiddlewaretoken": token})


def test_a_permitted_operator_changes_a_limit_through_configure(limits_client, reports):
    response = _post(limits_client, {"concurrency": "4", "rate_limit": "10", "rate_period": "60"})
    assert response.status_code == 302 and response["Location"] == CHANGE
    state = queues.get("reports")
    assert state is not None
    assert (state.concurrency, state.rate_limit, state.rate_period) == (4, 10, 60)
    assert state.key_concurrency is None and state.key_rate_period == 1
    assert state.source == queues.SOURCE_RUN_TIME
    entry = LogEntry.objects.get(object_id="reports")
    assert entry.change_message.startswith("Limits changed: concurrency=4")


def test_the_queue_pages_link_to_the_form(limits_client, reports):
    assert URL in limits_client.get(CHANGE).content.decode()
    assert (
        URL in limits_client.get(reverse("admin:django_pgqueue_queue_changelist")).content.decode()
    )


def test_get_changes_nothing_and_shows_the_current_limits(limits_client, reports):
    page = limits_client.get(URL)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="concurrency"' in html and 'value="3"' not in html  # reset: no limit
    assert 'id="id_concurrency_helptext"' in html  # the input's aria-describedby target
    assert queues.get("reports") == reports
    assert not LogEntry.objects.exists()


def test_without_the_permission_403_and_nothing_changes(reports):
    client = csrf_client(_staff("looker", "view_queue"))
    assert client.get(URL).status_code == 403
    assert URL not in client.get(CHANGE).content.decode()
    admin = csrf_client(_staff("limiter", "view_queue", "change_queue"))
    token = csrf_token(admin, URL)
    client.cookies["csrftoken"] = token
    response = client.post(URL, {**BLANK, "concurrency": "9", "csrfmiddlewaretoken": token})
    assert response.status_code == 403
    assert queues.get("reports") == reports
    assert not LogEntry.objects.exists()


def test_a_post_without_csrf_is_refused(limits_client, reports):
    assert limits_client.post(URL, {**BLANK, "concurrency": "9"}).status_code == 403
    assert queues.get("reports") == reports


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("concurrency", "-1", "concurrency"),
        ("key_concurrency", " 0 ", "key_concurrency"),
        ("key_concurrency", "abc", "key_concurrency must be a whole number"),
        ("rate_limit", str(10**30), "rate_limit"),
        ("rate_period", "0", "rate_period (seconds)"),
        ("key_rate_period", "1.5", "key_rate_period (seconds)"),
        ("key_rate_limit", "9" * 100, "at most 40 characters"),
    ],
)
def test_a_bad_value_rerenders_with_the_fields_error_and_writes_nothing(
    limits_client, reports, field, value, says
):
    response = _post(limits_client, {"concurrency": "5", field: value})
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert list(errors) == [field]
    assert any(says in message for message in errors[field])
    assert f"field-{field}" in response.content.decode()
    assert queues.get("reports") == reports
    assert not LogEntry.objects.exists()


def test_reset_hands_the_queue_back_to_its_settings(limits_client, reports):
    queues.configure("reports", concurrency=7)
    assert 'value="7"' in limits_client.get(URL).content.decode()  # the form shows them
    token = csrf_token(limits_client, URL)
    response = limits_client.post(URL, {**BLANK, "_reset": "1", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    state = queues.get("reports")
    assert state is not None and state.source != queues.SOURCE_RUN_TIME
    assert state.concurrency is None
    assert LogEntry.objects.get(object_id="reports").change_message == "Limits reset to settings."


@pytest.mark.parametrize("name", ["nowhere", "q" * 101, "nul\x00name"])
def test_an_unknown_or_impossible_queue_name_is_404(limits_client, name):
    url = reverse("admin:django_pgqueue_queue_limits", args=[name])
    assert limits_client.get(url).status_code == 404
    assert not LogEntry.objects.exists()
