"""The log of finished attempts: a summary by default, failures on their own lines,
a repeating failure's traceback once."""

from __future__ import annotations

import json
import logging
import uuid

import pytest
from django.test import override_settings

from django_pgqueue.checks import check_settings
from django_pgqueue.logs import AttemptLog
from django_pgqueue.outcomes import JobOutcome


def _outcome(job_id: int, status: str, error: str = "") -> JobOutcome:
    outcome = JobOutcome(
        id=job_id,
        token=uuid.uuid4(),
        status=status,
        last_error=error or None,
        task_path="demo.consume",
        attempt=1,
        duration=0.01,
    )
    if error:
        outcome.error_json = json.dumps({"traceback": f"Traceback ...\n{error}"})
    return outcome


@pytest.fixture
def log(caplog):
    caplog.set_level(logging.DEBUG, logger="django_pgqueue.test")
    return logging.getLogger("django_pgqueue.test")


def test_summary_mode_logs_counts_at_info_and_each_attempt_at_debug(log, caplog):
    attempts = AttemptLog("summary", summary_seconds=3600)
    for job_id in range(500):
        attempts.record(log, "w1", _outcome(job_id, "succeeded"), "succeeded")
    info = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert info == []  # the window is not over: nothing at INFO yet
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) == 500
    attempts.flush(log, "w1")
    (summary,) = [r for r in caplog.records if r.levelno == logging.INFO]
    assert summary.getMessage() == "Worker w1: 500 attempt(s) in 0 s: succeeded=500"
    assert summary.event == "attempt_summary"


def test_a_window_that_ends_logs_one_summary_line(log, caplog):
    attempts = AttemptLog("summary", summary_seconds=0.0)
    attempts.record(log, "w1", _outcome(1, "succeeded"), "succeeded")
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO] == [
        "Worker w1: 1 attempt(s) in 0 s: succeeded=1"
    ]


def test_each_mode_keeps_a_line_per_attempt(log, caplog):
    attempts = AttemptLog("each")
    attempts.record(log, "w1", _outcome(1, "succeeded"), "succeeded")
    (line,) = caplog.records
    assert line.levelno == logging.INFO and "outcome=succeeded" in line.getMessage()


def test_a_retried_failure_is_a_warning_and_a_dead_one_an_error(log, caplog):
    attempts = AttemptLog("summary", summary_seconds=3600)
    attempts.record(log, "w1", _outcome(1, "failed", "ValueError: a"), "failed")
    attempts.record(log, "w1", _outcome(2, "dead", "ValueError: b"), "dead")
    levels = [(r.levelno, r.outcome) for r in caplog.records]
    assert levels == [(logging.WARNING, "failed"), (logging.ERROR, "dead")]


def test_a_repeating_failure_keeps_its_traceback_only_the_first_time(log, caplog):
    attempts = AttemptLog("each")
    for job_id in range(3):
        attempts.record(log, "w1", _outcome(job_id, "failed", "ConnectionError: down"), "failed")
    first, second, third = caplog.records
    assert first.traceback.startswith("Traceback")
    assert getattr(second, "traceback", None) is None
    assert "the same failure 3 times" in third.getMessage()


@pytest.mark.parametrize("value", ["loud", None, 1])
def test_a_bad_job_log_mode_is_a_clear_check_error(value):
    with override_settings(PGQUEUE={"JOB_LOG": value}):
        (error,) = check_settings()
    assert error.id == "django_pgqueue.E001"
    assert "PGQUEUE['JOB_LOG'] must be one of 'summary', 'each'" in error.msg


@pytest.mark.django_db(transaction=True)
def test_a_consumer_failing_the_same_way_prints_its_traceback_once(run_worker, caplog):
    from django_pgqueue import mq
    from django_pgqueue.mq.consumers import unregister

    @mq.consumer("repeatfail", vt=30, batch=5)
    def handle(message: mq.Message) -> None:
        raise ConnectionError("payments service unreachable")

    try:
        mq.create("repeatfail")
        mq.send_batch("repeatfail", [{"n": n} for n in range(4)])
        caplog.set_level(logging.WARNING, logger="django_pgqueue")
        run_worker(burst=True, lease_seconds=30)
    finally:
        unregister("repeatfail")
    lines = [r for r in caplog.records if "failed on message" in r.getMessage()]
    assert len(lines) == 4
    assert all(r.levelno == logging.WARNING for r in lines)
    assert sum("Traceback" in r.getMessage() for r in lines) == 1
    # Consumer threads log concurrently: the fourth count need not be the last record.
    assert any("the same failure 4 times" in r.getMessage() for r in lines)


@pytest.mark.django_db(transaction=True)
def test_a_worker_in_summary_mode_writes_counts_not_a_line_per_job(worker_process):
    from django_pgqueue import enqueue_many
    from testproject.demo import tasks

    enqueue_many(tasks.add, [((1, 2), {})] * 20)
    proc = worker_process(
        "--burst", env={"PGQUEUE_JOB_LOG": "summary", "PGQUEUE_LOG_LEVEL": "INFO"}
    )
    assert proc.wait(60) == 0, proc.output()
    output = proc.output()
    assert "outcome=succeeded" not in output
    (summary,) = [line for line in output.splitlines() if "attempt(s) in" in line]
    assert summary.endswith("succeeded=20"), summary
