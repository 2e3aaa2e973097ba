"""``/queues``: the job queues' flow control through the HTTP API, the operator's
alone; every write goes through ``django_pgqueue.queues`` (the same rules and the
same row as the Python API, the admin and the command)."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.test import override_settings

from django_pgqueue import queues
from django_pgqueue.models import Application, Queue

from .conftest import problem_of

pytestmark = pytest.mark.django_db(transaction=True)


def test_configure_read_list_pause_resume_and_reset(api):
    client = api("queues")
    made = client.call("put", "queues/reports", {"concurrency": 3, "key_rate_limit": 5})
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["concurrency"] == 3 and body["key_rate_limit"] == 5
    assert body["rate_limit"] is None and body["rate_period"] == 1
    assert body["source"] == "run time" and body["paused"] is False
    # Python reads what the API wrote: one row, one owner.
    assert queues.get("reports").key_rate_limit == 5
    changed = client.call("put", "queues/reports", {"rate_limit": 10, "rate_period": 60})
    assert changed.status_code == 200
    assert changed.json()["concurrency"] is None  # a PUT is the whole configuration
    assert client.get("queues/reports").json()["rate_limit"] == 10
    assert [q["name"] for q in client.get("queues").json()["data"]] == ["reports"]
    assert client.post("queues/reports/pause").json()["paused"] is True
    assert queues.get("reports").paused
    assert client.post("queues/reports/resume").json()["paused"] is False
    with override_settings(PGQUEUE={"QUEUES": {"reports": {"concurrency": 2}}}):
        reset = client.post("queues/reports/reset").json()
    assert (reset["concurrency"], reset["rate_limit"], reset["source"]) == (2, None, "settings")
    assert queues.get("reports").overridden_at is None
    messages = list(LogEntry.objects.order_by("pk").values_list("change_message", flat=True))
    assert len(messages) == 5 and messages[2].startswith("Paused. (by API key pgq_")
    assert messages[4].startswith("Reset to settings: concurrency=2,")


def test_unknown_queues_are_a_problem_404(api):
    client = api("queues")
    for response in (client.get("queues/nothing"), client.post("queues/nothing/reset")):
        problem = problem_of(response, 404)
        assert "has no configuration" in problem["detail"]
    assert not Queue.objects.exists()


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"concurrency": 0}, "concurrency", "concurrency must be between 1 and 2147483647"),
        ({"rate_limit": 5, "rate_period": 0}, "rate_period", "rate_period (seconds) must be"),
        ({"key_rate_limit": -1}, "key_rate_limit", "must be between 1"),
        ({"concurrency": "3"}, "concurrency", "Expected an integer or null."),
        ({"concurrency": True}, "concurrency", "Expected an integer or null."),
        ({"concurrency": 2.0}, "concurrency", "Expected an integer or null."),
        ({"concurrency": 2**31}, "concurrency", "must be between 1 and 2147483647"),
        ({"concurency": 3}, "concurency", "Unknown field."),
    ],
)
def test_bad_limits_are_a_422_naming_the_field_and_nothing_is_written(api, body, field, message):
    response = api("queues").call("put", "queues/reports", body)
    problem = problem_of(response, 422)
    assert list(problem["errors"]) == [field]
    assert message in problem["errors"][field][0]
    assert not Queue.objects.exists()


def test_a_bad_name_or_body_is_refused_before_any_write(api):
    client = api("queues")
    long_name = "x" * 101
    problem = problem_of(client.call("put", f"queues/{long_name}", {}), 422)
    assert "more than the 100" in problem["errors"]["name"][0]
    problem_of(client.call("put", "queues/reports", raw=b"[1]"), 400)
    problem_of(client.call("put", "queues/reports", raw=b"{", content_type="text/plain"), 415)
    problem_of(client.call("put", "queues/a%00b", {}), 400)
    problem_of(client.call("patch", "queues/reports", {}), 405)
    assert not Queue.objects.exists()


def test_a_key_bound_to_an_application_may_do_nothing_with_queues(api):
    queues.configure("reports", concurrency=3)
    Application.objects.create(uid="cust_a")
    customer = api(application="cust_a")  # every scope, queues included
    for method, path in (
        ("get", "queues"),
        ("get", "queues/reports"),
        ("put", "queues/reports"),
        ("post", "queues/reports/pause"),
        ("post", "queues/reports/resume"),
        ("post", "queues/reports/reset"),
    ):
        problem = problem_of(customer.call(method, path, {}), 403)
        assert "operators only" in problem["detail"], (method, path)
    row = queues.get("reports")
    assert row.concurrency == 3 and not row.paused
    # The operator's key without the scope is refused too, naming it.
    problem = problem_of(api("read", "manage").get("queues"), 403)
    assert "'queues' scope" in problem["detail"]
