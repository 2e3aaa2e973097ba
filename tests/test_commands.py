"""Command-line validation of runworkers: bad values are named before anything runs."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "argument --concurrency: must be 1 or more, got 0"),
        (["--processes", "two"], "argument --processes: expected a whole number, got 'two'"),
        (["--lease", "0"], "argument --lease: must be above 0, got 0"),
        (["--poll-interval", "soon"], "expected a number of seconds, got 'soon'"),
        (["--prefetch", "-1"], "argument --prefetch: must be 0 or more, got -1"),
        (["--queues", ","], "comma-separated list of queue names"),
    ],
)
def test_bad_options_are_named(args, message):
    with pytest.raises(CommandError, match=message):
        call_command("runworkers", *args)


def test_worker_id_cannot_name_several_processes():
    with pytest.raises(CommandError, match="--worker-id names one process"):
        call_command("runworkers", "--processes", "2", "--worker-id", "w1")


@pytest.mark.django_db
def test_queue_names_outside_queues_are_an_error(settings):
    settings.TASKS = {
        "default": {
            "BACKEND": "django_pgqueue.backend.PgQueueBackend",
            "QUEUES": ["default", "emails"],
        }
    }
    with pytest.raises(CommandError, match=r"--queues names 'emials', which no TASKS backend"):
        call_command("runworkers", "--queues", "emials", "--burst")


@pytest.mark.django_db
def test_leaving_webhooks_out_is_warned(settings, caplog):
    from django_pgqueue.models import Endpoint
    from django_pgqueue.worker.selection import check_queue_selection

    assert check_queue_selection(["default"]) == []  # no endpoints: nothing to leave out
    settings.PGQUEUE = {"WEBHOOKS": {"ALLOW_NETWORKS": ["127.0.0.0/8"], "ALLOW_HTTP": True}}
    Endpoint.objects.create(url="http://127.0.0.1:9/")
    [warning] = check_queue_selection(["default"])
    assert "leaves webhook deliveries out" in warning and "--queues webhooks" in warning
    assert check_queue_selection(["default", "webhooks"]) == []
    assert check_queue_selection(None) == []
