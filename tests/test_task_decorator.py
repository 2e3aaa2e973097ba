"""``django_pgqueue.task``: the same task options on every supported Django."""

from __future__ import annotations

import pytest

import django_pgqueue
from django_pgqueue import compat
from django_pgqueue.backend import PgQueueTask
from django_pgqueue.compat import InvalidTask, passes_options, task_with_options


def flaky_thing(x):
    return x


def test_it_is_the_frameworks_decorator_where_that_passes_options():
    if passes_options(compat.framework_task):  # Django 6.1+, the 5.2 backport
        assert django_pgqueue.task is compat.framework_task
    else:  # Django 6.0
        assert django_pgqueue.task is task_with_options


def _backoff(exc, result):
    return 1.0


@pytest.mark.parametrize("decorator", [django_pgqueue.task, task_with_options])
def test_options_reach_the_backends_task_class(decorator):
    made = decorator(max_attempts=3, backoff=_backoff, queue_name="emails", priority=5)(flaky_thing)
    assert isinstance(made, PgQueueTask)
    assert (made.max_attempts, made.backoff) == (3, _backoff)
    assert (made.queue_name, made.priority, made.backend) == ("emails", 5, "default")
    assert made.call(7) == 7
    bare = decorator(flaky_thing)
    assert isinstance(bare, PgQueueTask) and bare.max_attempts is None


@pytest.mark.parametrize("decorator", [django_pgqueue.task, task_with_options])
def test_bad_options_are_refused_by_the_backend(decorator):
    with pytest.raises(InvalidTask, match="max_attempts must be a positive integer, got 0"):
        decorator(max_attempts=0)(flaky_thing)


def test_run_after_cannot_be_static():
    with pytest.raises(TypeError, match="run_after cannot be defined statically"):
        task_with_options(run_after=None)(flaky_thing)


def test_passes_options_reads_the_signature():
    def with_options(function=None, *, priority=0, **kwargs): ...

    def without(function=None, *, priority=0): ...

    assert passes_options(with_options) and not passes_options(without)
