"""Stop signals are acted on outside the signal handler (worker/signals.py)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from django_pgqueue.worker import signals as stop_signals
from django_pgqueue.worker.signals import SIGNAL_REPEAT_SECONDS, StopSignals


@pytest.fixture
def relay():
    """A StopSignals recording what it was told, installed in this (main) thread."""
    seen: list[tuple[str, int]] = []
    stopping = threading.Event()

    def first(signum: int) -> None:
        seen.append(("first", signum))
        stopping.set()

    def again(signum: int) -> None:
        seen.append(("again", signum))

    signals = StopSignals(first, again, name="test-signals")
    assert signals.install()
    try:
        yield signals, seen, stopping
    finally:
        signals.restore()


def test_a_signal_while_this_thread_holds_the_stop_events_lock_still_stops(relay):
    """The hang it fixes: Python ran the handler inside the claim loop's
    ``Event.clear()``/``wait()``, with the event's (non-reentrant) lock held by the
    same thread, and a handler that set the event waited for itself for ever."""
    _, seen, stopping = relay
    with stopping._cond:  # where the claim loop is, inside Event.clear() or wait()
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # bytecodes: the handler runs between two of them
            pass
        time.sleep(0.05)
    assert stopping.wait(5), "the stop never arrived"
    assert seen == [("first", signal.SIGTERM)]


def test_a_repeat_inside_the_window_is_the_same_request_and_a_later_one_is_not(relay):
    _, seen, stopping = relay
    os.kill(os.getpid(), signal.SIGTERM)
    assert stopping.wait(5)
    os.kill(os.getpid(), signal.SIGINT)  # a process group's copy, moments later
    time.sleep(0.2)
    assert seen == [("first", signal.SIGTERM)]
    time.sleep(SIGNAL_REPEAT_SECONDS)
    os.kill(os.getpid(), signal.SIGINT)
    deadline = time.monotonic() + 5
    while len(seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == [("first", signal.SIGTERM), ("again", signal.SIGINT)]


def test_restore_puts_back_the_previous_handlers():
    before = {sig: signal.getsignal(sig) for sig in stop_signals.STOP_SIGNALS}
    signals = StopSignals(lambda s: None, lambda s: None, name="test-signals")
    assert signals.install()
    assert signal.getsignal(signal.SIGTERM) != before[signal.SIGTERM]
    signals.restore()
    assert {sig: signal.getsignal(sig) for sig in stop_signals.STOP_SIGNALS} == before


def test_outside_the_main_thread_nothing_is_installed():
    result: list[bool] = []
    signals = StopSignals(lambda s: None, lambda s: None, name="test-signals")
    thread = threading.Thread(target=lambda: result.append(signals.install()))
    thread.start()
    thread.join(5)
    assert result == [False]
    signals.restore()  # harmless when nothing was installed
