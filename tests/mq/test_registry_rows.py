"""A message-queue registry row inserted by SQL with a name no queue can have: the
calls over every queue (``list_queues``, ``metrics_all``, the status command) answer
for the real queues and say which row they left out, where the first such row used
to fail them."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.db import connection

from django_pgqueue import mq, status

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def bad_row() -> str:
    mq.create("orders")
    name = 'Bad Name"x'
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO pgqueue_mq_queue (name, unlogged) VALUES (%s, false)", [name])
    return name


def test_calls_over_every_queue_answer_for_the_real_ones(bad_row):
    assert [q.name for q in mq.list_queues()] == ["orders"]
    assert [m.queue_name for m in mq.metrics_all()] == ["orders"]
    left_out: list[str] = []
    assert [q.name for q in mq.list_queues(left_out)] == ["orders"]
    assert len(left_out) == 1 and repr(bad_row) in left_out[0]


def test_the_status_command_lists_the_real_queues_and_names_the_row(bad_row):
    data = status.snapshot()
    assert [q["name"] for q in data["message_queues"]] == ["orders"]
    assert any(repr(bad_row) in w and "pgqueue_mq_queue" in w for w in data["warnings"])
    out = io.StringIO()
    call_command("pgqueue_status", stdout=out)
    assert "orders" in out.getvalue() and "pgqueue_mq_queue" in out.getvalue()
