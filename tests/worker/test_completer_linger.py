"""The completer's batches: a small batch waits once for the outcomes of the rows its
process still holds, and never when nothing more can come.

``Completer._take`` is what its thread runs before each write; these tests call it
on a completer that is not started, with outcomes put in its queue by a second
thread as a task thread would.
"""

from __future__ import annotations

import threading
import time
import uuid

from django_pgqueue.outcomes import JobOutcome
from django_pgqueue.worker import completer as completer_module
from django_pgqueue.worker.completer import Completer


def _completer(held_rows: int) -> Completer:
    held = {("jobs", i): uuid.uuid4() for i in range(held_rows)}
    return Completer(
        worker_id="linger-test",
        sources={},
        lease_seconds=30.0,
        retry_budget=1.0,
        held=held,
        held_lock=threading.Lock(),
        on_written=lambda batch, written: None,
        test_hooks=frozenset(),
    )


def _outcome(job_id: int) -> JobOutcome:
    return JobOutcome(job_id, uuid.uuid4(), "succeeded", result_json="null")


def test_a_small_batch_takes_the_outcomes_that_arrive_while_it_waits():
    completer = _completer(held_rows=3)
    completer.outcomes.put(_outcome(0))

    def task_threads() -> None:
        time.sleep(completer_module.LINGER_SECONDS / 3)
        completer.outcomes.put(_outcome(1))
        completer.outcomes.put(_outcome(2))

    thread = threading.Thread(target=task_threads)
    thread.start()
    batch, stopping = completer._take(1.0)
    thread.join()
    assert [o.id for o in batch] == [0, 1, 2]
    assert not stopping


def _sleeps(monkeypatch) -> list[float]:
    """The completer's sleeps, recorded (and slept): counted, not timed."""
    slept: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(completer_module.time, "sleep", sleep)
    return slept


def test_nothing_more_to_come_means_no_wait(monkeypatch):
    """Every held row is in the batch: it is written at once."""
    slept = _sleeps(monkeypatch)
    completer = _completer(held_rows=1)
    completer.outcomes.put(_outcome(0))
    batch, _ = completer._take(1.0)
    assert [o.id for o in batch] == [0]
    assert slept == []


def test_a_batch_waits_once_and_a_stop_still_ends_it(monkeypatch):
    slept = _sleeps(monkeypatch)
    completer = _completer(held_rows=10)
    completer.outcomes.put(_outcome(0))
    batch, stopping = completer._take(1.0)
    # One wait for outcomes that did not come, then the batch goes as it is.
    assert [o.id for o in batch] == [0] and not stopping
    assert slept == [completer_module.LINGER_SECONDS]

    completer.outcomes.put(_outcome(1))
    completer.stop()
    batch, stopping = completer._take(1.0)
    assert [o.id for o in batch] == [1] and stopping


def test_a_large_batch_does_not_wait(monkeypatch):
    slept = _sleeps(monkeypatch)
    completer = _completer(held_rows=1000)
    for i in range(completer_module.LINGER_UNDER):
        completer.outcomes.put(_outcome(i))
    batch, _ = completer._take(1.0)
    assert len(batch) == completer_module.LINGER_UNDER
    assert slept == []
