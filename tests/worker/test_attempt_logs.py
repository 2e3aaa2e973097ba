"""Each attempt's log line names the row it ran (its id in its table), and a failed
one says what went wrong."""

from __future__ import annotations

import logging

import pytest

from django_pgqueue import mq
from django_pgqueue.mq.consumers import unregister

pytestmark = pytest.mark.django_db(transaction=True)


def attempt_records(caplog):
    return [r for r in caplog.records if getattr(r, "event", "") == "attempt"]


def test_a_failed_message_logs_its_message_id_and_its_error(run_worker, caplog):
    @mq.consumer("logged", vt=5)
    def handle(message: mq.Message) -> None:
        raise ValueError(f"cannot handle message {message.msg_id}")

    try:
        mq.create("logged")
        mq.send("logged", {"n": 0})  # ids of the queue start at 1: the second is 2
        mq.archive("logged", mq.read("logged")[0].msg_id)
        bad = mq.send("logged", {"n": 1})
        with caplog.at_level(logging.INFO, logger="django_pgqueue.worker"):
            run_worker(burst=True, lease_seconds=5)
    finally:
        unregister("logged")
    (record,) = attempt_records(caplog)
    assert record.job_id == bad == 2
    assert record.error == f"ValueError: cannot handle message {bad}"
    assert record.getMessage().startswith(f"messages {bad} ")
    assert f"error=ValueError: cannot handle message {bad}" in record.getMessage()
