"""Bad schedules, unique keys and atomic tasks fail at start-up or enqueue, naming the problem."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_pgqueue.checks import check_schedules, check_settings
from django_pgqueue.compat import InvalidTask, task
from django_pgqueue.periodic import periodic
from django_pgqueue.periodic.registry import _declared
from testproject.demo import tasks

ADD = "testproject.demo.tasks.add"


def ids(messages):
    return [m.id for m in messages]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"task": ADD, "cron": "61 * * * *"}, "['nightly']['cron']: bad cron expression"),
        ({"task": ADD, "cron": "* * *"}, "['nightly']['cron']: bad cron expression"),
        ({"task": ADD, "cron": "0 3 * * *", "timezone": "Paris"}, "['timezone']: unknown time"),
        ({"task": ADD}, "has no 'cron' key"),
        ({"task": ADD, "cron": "* * * * *", "catch_up": "some"}, "['catch_up'] must be one of"),
        ({"task": ADD, "cron": "* * * * *", "every": 5}, "Unknown key(s) in"),
        ({"task": ADD, "cron": "* * * * *", "args": "x"}, "['args'] must be a list"),
    ],
)
def test_bad_schedule_entries_are_e001_naming_the_key(entry, message):
    with override_settings(PGQUEUE={"SCHEDULE": {"nightly": entry}}):
        messages = check_settings()
    assert ids(messages) == ["django_pgqueue.E001"]
    assert message in messages[0].msg
    assert "PGQUEUE['SCHEDULE']['nightly']" in messages[0].msg


def test_unknown_task_path_in_schedule_is_e020():
    schedule = {
        "gone": {"task": "testproject.demo.tasks.no_such_task", "cron": "* * * * *"},
        "string": {"task": "testproject.demo.tasks.not_a_task", "cron": "* * * * *"},
        "fine": {"task": ADD, "cron": "* * * * *"},
    }
    with override_settings(PGQUEUE={"SCHEDULE": schedule}):
        messages = check_schedules()
    assert ids(messages) == ["django_pgqueue.E020", "django_pgqueue.E020"]
    assert "PGQUEUE['SCHEDULE']['gone']['task'] is 'testproject.demo.tasks.no_such_task'" in (
        messages[0].msg
    )
    assert "not a Task" in messages[1].msg


def test_a_name_in_settings_and_decorator_is_e021():
    periodic(cron="0 * * * *", name="clash")(tasks.add)
    try:
        with override_settings(PGQUEUE={"SCHEDULE": {"clash": {"task": ADD, "cron": "* * * * *"}}}):
            messages = check_schedules()
    finally:
        _declared.pop("clash", None)
    assert ids(messages) == ["django_pgqueue.E021"]


def test_decorator_refuses_a_bad_cron_at_import():
    with pytest.raises(ImproperlyConfigured, match=r"@periodic on testproject\.demo\.tasks\.add"):
        periodic(cron="*/0 * * * *")(tasks.add)
    with pytest.raises(ImproperlyConfigured, match="on top of @task"):
        periodic(cron="* * * * *")(len)  # type: ignore[type-var]


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_atomic_task_refused_when_the_queue_database_is_another_one():
    from django.conf import settings

    default = settings.DATABASES["default"]
    elsewhere = {"default": default, "queue": {**default, "NAME": "somewhere_else"}}
    with override_settings(DATABASES=elsewhere, PGQUEUE={"DATABASE": "queue"}):
        # Decorating still works, so a project whose queue moved keeps importing;
        # the enqueue is refused before any SQL.
        atomic_task = task(atomic=True)(_effect)
        with pytest.raises(InvalidTask, match="atomic=True cannot work here: PGQUEUE"):
            atomic_task.enqueue()

    # The same database under another alias is fine.
    same = {"default": default, "queue": dict(default)}
    with override_settings(DATABASES=same, PGQUEUE={"DATABASE": "queue"}):
        assert task(atomic=True)(_effect).atomic


def _effect() -> None:
    """A module-level function for the atomic checks above."""


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"args": ["a\x00b"]}, ": positional argument 0 cannot be stored: args[0] holds a NUL"),
        (
            {"kwargs": {"x": float("nan")}},
            ": keyword argument 'x' is not JSON-serialisable: kwargs['x'] is nan",
        ),
        ({"args": [object()]}, ": positional argument 0 is not JSON-serialisable"),
        ({"kwargs": {"x": "\ud800"}}, ": keyword argument 'x' cannot be stored"),
        ({"args": [[[[1]]]]}, ": positional argument 0 is nested too deeply"),
        ({"cron": "1" * 5000 + " * * * *"}, "['cron']: a cron expression is at most"),
        ({"cron": "* * * * 99999999999999999999"}, "['cron']: bad cron expression"),
        ({"timezone": "E" * 10_000}, "['timezone']: a time zone name is at most"),
        ({"timezone": "Europe/\x00Paris"}, "['timezone']: unknown time zone"),
        ({"queue_name": "q\x00"}, "['queue_name'] must be a queue name"),
        (
            {"args": ["x" * 600], "kwargs": {"y": "z" * 600}},
            ": its arguments take 1212 bytes as JSON (UTF-8), more than PGQUEUE['MAX_ARGS_BYTES']",
        ),
    ],
)
def test_schedule_arguments_pass_the_input_contract_at_check_time(entry, message):
    full = {"task": ADD, "cron": "* * * * *", **entry}
    limits = {"MAX_JSON_DEPTH": 3, "MAX_ARGS_BYTES": 1000}
    with override_settings(PGQUEUE={"SCHEDULE": {"nightly": full}, **limits}):
        messages = check_settings()
    assert ids(messages) == ["django_pgqueue.E001"]
    assert f"PGQUEUE['SCHEDULE']['nightly']{message}" in messages[0].msg


@pytest.mark.parametrize("name", ["night\x00ly", "night\ud800ly"])
def test_a_schedule_name_with_nul_or_a_surrogate_is_refused(name):
    with override_settings(PGQUEUE={"SCHEDULE": {name: {"task": ADD, "cron": "* * * * *"}}}):
        messages = check_settings()
    assert ids(messages) == ["django_pgqueue.E001"]
    assert "schedule names must be" in messages[0].msg
    assert "NUL" in messages[0].msg or "surrogate" in messages[0].msg


def test_decorator_refuses_arguments_outside_the_contract():
    with pytest.raises(ImproperlyConfigured, match=r"@periodic on .*: positional argument 0"):
        periodic(cron="* * * * *", name="nul-args", args=["\x00"])(tasks.add)
    assert "nul-args" not in _declared
