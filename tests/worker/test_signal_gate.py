"""When the worker may skip building a TaskResult and sending task_started/task_finished."""

from __future__ import annotations

import logging

import pytest
from django.utils.log import RequireDebugFalse, RequireDebugTrue

from django_pgqueue.compat import task_started
from django_pgqueue.signal_gate import SignalGate


@pytest.fixture
def gate():
    """A gate on task_started whose logger stops propagating (handlers set per test;
    pytest's own capture handlers are replaced inside each test body)."""
    gate = SignalGate(task_started, recheck_seconds=0)
    logger = gate.logger
    saved = (logger.level, logger.propagate, list(logger.handlers))
    logger.propagate = False
    yield gate
    logger.level, logger.propagate = saved[0], saved[1]
    logger.handlers[:] = saved[2]


def handler(level=logging.NOTSET, *filters):
    h = logging.NullHandler()
    h.setLevel(level)
    for f in filters:
        h.addFilter(f)
    return h


def test_only_the_framework_log_receiver_and_nothing_writes(gate, settings):
    settings.DEBUG = False
    gate.logger.setLevel(logging.INFO)
    # Django's default: console only when DEBUG, mail_admins from ERROR when not DEBUG.
    gate.logger.handlers[:] = [
        handler(logging.INFO, RequireDebugTrue()),
        handler(logging.ERROR, RequireDebugFalse()),
    ]
    assert not gate.wanted(logging.INFO)
    assert gate.wanted(logging.ERROR)  # a failed task still reaches mail_admins
    settings.DEBUG = True
    assert gate.wanted(logging.INFO)


def test_logger_below_the_level_or_a_plain_handler(gate):
    gate.logger.setLevel(logging.WARNING)
    gate.logger.handlers[:] = [handler()]
    assert not gate.wanted(logging.INFO)
    gate.logger.setLevel(logging.INFO)
    assert gate.wanted(logging.INFO)


def test_any_other_receiver_is_always_served(gate):
    gate.logger.setLevel(logging.CRITICAL)
    gate.logger.handlers[:] = []

    def receiver(sender, task_result, **kwargs):
        pass

    task_started.connect(receiver)
    try:
        assert gate.wanted(logging.INFO)
    finally:
        task_started.disconnect(receiver)
    assert not gate.wanted(logging.INFO)


def test_an_answer_is_reused_until_it_expires_but_not_past_a_new_receiver(settings):
    """The worker asks twice per job: the logger chain is walked once a second at
    most, while a receiver connected meanwhile is served at once."""
    settings.DEBUG = False
    gate = SignalGate(task_started, recheck_seconds=3600)
    logger = gate.logger
    saved = (logger.level, logger.propagate, list(logger.handlers))
    try:
        logger.propagate = False
        logger.setLevel(logging.INFO)
        logger.handlers[:] = [handler(logging.INFO, RequireDebugTrue())]
        assert not gate.wanted(logging.INFO)
        logger.handlers[:] = [handler(logging.INFO)]  # would write now...
        assert not gate.wanted(logging.INFO)  # ...but the answer is not an hour old

        def receiver(sender, task_result, **kwargs):
            pass

        task_started.connect(receiver)
        try:
            assert gate.wanted(logging.INFO)
        finally:
            task_started.disconnect(receiver)
        assert gate.wanted(logging.INFO)  # read again after the change: the handler writes
    finally:
        logger.level, logger.propagate = saved[0], saved[1]
        logger.handlers[:] = saved[2]
