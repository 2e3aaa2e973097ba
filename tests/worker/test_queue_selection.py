"""``runworkers --queues`` with a name no job has used starts with a warning, not silently."""

from __future__ import annotations

import logging

import pytest
from django.core.management import call_command

from django_pgqueue.worker.selection import unseen_queue_warnings
from testproject.demo import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_queue_no_job_has_used_is_warned(caplog):
    caplog.set_level(logging.WARNING, logger="django_pgqueue")
    call_command("runworkers", "--queues", "nosuchqueue", "--burst")
    (warning,) = [r.getMessage() for r in caplog.records if "no job has used" in r.getMessage()]
    assert "--queues names 'nosuchqueue'" in warning and "QUEUES" in warning


def test_a_queue_with_waiting_jobs_is_not_warned():
    tasks.add.using(queue_name="emails").enqueue(1, 2)
    assert unseen_queue_warnings(["emails", "webhooks"]) == []
    (typo,) = unseen_queue_warnings(["emails", "emials"])
    assert "'emials'" in typo


def test_declared_queues_leave_it_to_the_error(settings):
    settings.TASKS = {
        "default": {"BACKEND": "django_pgqueue.backend.PgQueueBackend", "QUEUES": ["default"]}
    }
    assert unseen_queue_warnings(["default"]) == []
