"""Settings validation and system checks."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_pgqueue.checks import check_settings
from django_pgqueue.conf import get_settings, validate


def ids(messages):
    return [m.id for m in messages]


def test_defaults():
    conf = validate({})
    assert conf.DATABASE == "default"
    assert conf.LEASE_SECONDS == 30.0
    assert conf.PREFETCH is None
    assert conf.WEBHOOKS["RETRY_SCHEDULE"][:3] == [0, 5, 300]
    assert (conf.MAX_JSON_DEPTH, conf.MAX_RESULT_BYTES) == (100, 1024 * 1024)


def test_unknown_key_names_valid_ones():
    with pytest.raises(
        ImproperlyConfigured,
        match=r"Unknown key\(s\) in PGQUEUE: LEASE\. Valid keys are: .*LEASE_SECONDS",
    ):
        validate({"LEASE": 5})
    with pytest.raises(ImproperlyConfigured, match=r"PGQUEUE\['WEBHOOKS'\]: TIMEOUT"):
        validate({"WEBHOOKS": {"TIMEOUT": 5}})


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"LEASE_SECOND": 5}, r"PGQUEUE: LEASE_SECOND \(did you mean 'LEASE_SECONDS'\?\)"),
        ({"batch_size": 5}, r"batch_size \(did you mean 'BATCH_SIZE'\?\)"),
        (
            {"WEBHOOKS": {"ALLOW_NETWORK": []}},
            r"PGQUEUE\['WEBHOOKS'\]: ALLOW_NETWORK \(did you mean 'ALLOW_NETWORKS'\?\)",
        ),
        (
            {"SCHEDULE": {"n": {"task": "a.b", "cron": "* * * * *", "time_zone": "UTC"}}},
            r"time_zone \(did you mean 'timezone'\?\)",
        ),
    ],
)
def test_unknown_keys_suggest_the_closest_valid_one(raw, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        validate(raw)


def test_an_unknown_key_like_no_valid_one_suggests_nothing():
    with pytest.raises(ImproperlyConfigured) as caught:
        validate({"ZZZZZZ": 1})
    assert "did you mean" not in str(caught.value)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"LEASE_SECONDS": -5}, r"PGQUEUE\['LEASE_SECONDS'\] must be a positive number, got -5"),
        ({"LEASE_SECONDS": "30"}, "must be a number"),
        ({"CONCURRENCY": 0}, "CONCURRENCY'] must be a positive integer"),
        ({"NOTIFY": "yes"}, "must be True or False"),
        ({"NOTIFY_CHANNEL": "x" * 64}, "at most 63"),
        ({"WEBHOOKS": {"ALLOW_NETWORKS": ["not-a-cidr"]}}, "not a CIDR"),
        ({"WEBHOOKS": {"RETRY_SCHEDULE": []}}, "non-empty list"),
        (
            {"WEBHOOKS": {"MAX_IN_FLIGHT": 0}},
            r"PGQUEUE\['WEBHOOKS'\]\['MAX_IN_FLIGHT'\] must be a positive integer, got 0",
        ),
        ({"MAX_JSON_DEPTH": 0}, r"MAX_JSON_DEPTH'\] must be a positive integer, got 0"),
        ({"MAX_JSON_DEPTH": 201}, r"MAX_JSON_DEPTH'\] must be at most 200"),
        ({"MAX_JSON_DEPTH": 10.5}, "must be a positive integer"),
        ({"MAX_RESULT_BYTES": -1}, r"MAX_RESULT_BYTES'\] must be a positive integer"),
        ("nope", "must be a dict"),
    ],
)
def test_bad_values_are_named(raw, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        validate(raw)


def test_cache_resets_when_settings_change():
    assert get_settings().LEASE_SECONDS != 7.0
    with override_settings(PGQUEUE={"LEASE_SECONDS": 7.0}):
        assert get_settings().LEASE_SECONDS == 7.0
    assert get_settings().LEASE_SECONDS != 7.0


def test_check_passes_on_the_test_project():
    assert ids(check_settings()) == []


def test_check_e001_bad_settings():
    with override_settings(PGQUEUE={"BATCH_SIZE": 0}):
        assert ids(check_settings()) == ["django_pgqueue.E001"]


def test_portal_destinations_default_to_https_and_take_the_four_schemes():
    assert validate({}).WEBHOOKS["PORTAL_DESTINATIONS"] == ["https"]
    chosen = validate({"WEBHOOKS": {"PORTAL_DESTINATIONS": ("nats", "https", "amqp", "http")}})
    assert chosen.WEBHOOKS["PORTAL_DESTINATIONS"] == ["nats", "https", "amqp", "http"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["https", "ftp"], r"holds 'ftp', which is not a destination: use 'https', 'http', "),
        (["HTTPS"], r"holds 'HTTPS', which is not a destination"),
        ("https", r"must be a list of schemes such as \['https', 'amqp'\], got 'https'"),
        ([], "must be a list of schemes"),
        ([None], "holds None"),
    ],
)
def test_a_bad_portal_destination_is_a_system_check_error_naming_it(value, message):
    prefix = r"PGQUEUE\['WEBHOOKS'\]\['PORTAL_DESTINATIONS'\] "
    with pytest.raises(ImproperlyConfigured, match=prefix + message):
        validate({"WEBHOOKS": {"PORTAL_DESTINATIONS": value}})
    with override_settings(PGQUEUE={"WEBHOOKS": {"PORTAL_DESTINATIONS": value}}):
        [error] = check_settings()
    assert error.id == "django_pgqueue.E001" and "PORTAL_DESTINATIONS" in error.msg


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_check_e002_sqlite():
    sqlite = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
    with override_settings(DATABASES=sqlite):
        messages = check_settings()
    assert ids(messages) == ["django_pgqueue.E002"]
    assert "needs PostgreSQL" in messages[0].msg
    # A fresh startproject has SQLite in DATABASES['default']: the hint names that entry,
    # not only PGQUEUE['DATABASE'], which such a project has never set.
    assert "DATABASES['default']['ENGINE'] to 'django.db.backends.postgresql'" in messages[0].hint


def test_check_e002_missing_alias():
    with override_settings(PGQUEUE={"DATABASE": "nowhere"}):
        messages = check_settings()
    assert ids(messages) == ["django_pgqueue.E002"]
    assert "'nowhere', which is not in DATABASES" in messages[0].msg


def test_check_w001_without_our_backend():
    with override_settings(TASKS={"default": {"BACKEND": "x.Y"}}):
        assert ids(check_settings()) == ["django_pgqueue.W001"]


def test_backend_options_are_checked():
    from django_pgqueue.backend import PgQueueBackend

    backend = PgQueueBackend("x", {"OPTIONS": {"MAX_ATTEMPTS": 0, "COLOR": 1}})
    messages = backend.check()
    assert ids(messages) == ["django_pgqueue.E010", "django_pgqueue.E010"]
    assert any("COLOR" in m.msg for m in messages)
    assert any("MAX_ATTEMPTS" in m.msg for m in messages)


def test_e010_is_reported_when_the_framework_registered_no_check(monkeypatch, settings):
    from django.core.checks.registry import registry

    from django_pgqueue.checks import check_task_backends

    settings.TASKS = {
        "default": {
            "BACKEND": "django_pgqueue.backend.PgQueueBackend",
            "OPTIONS": {"MAX_ATTEMPT": 5, "BACKOFF_BASE": -1},
        }
    }
    # As in a project that never imported the Tasks framework before `manage.py check`.
    framework = {c for c in registry.registered_checks if c.__module__.endswith("tasks.checks")}
    monkeypatch.setattr(registry, "registered_checks", registry.registered_checks - framework)
    messages = [m for m in check_task_backends() if m.id == "django_pgqueue.E010"]
    assert len(messages) == 2
    assert "MAX_ATTEMPT" in messages[0].msg and "BACKOFF_BASE" in messages[1].msg


def test_e010_is_not_reported_twice_when_the_framework_checks_too(settings):
    from django_pgqueue.checks import check_task_backends

    settings.TASKS = {
        "default": {
            "BACKEND": "django_pgqueue.backend.PgQueueBackend",
            "OPTIONS": {"MAX_ATTEMPT": 5},
        }
    }
    assert ids(check_task_backends()) == []


def test_e011_backport_missing_from_installed_apps(settings):
    import django

    from django_pgqueue.checks import check_task_backends

    if django.VERSION >= (6, 0):
        pytest.skip("Django 6 ships the Tasks framework; there is no backport to install")
    settings.INSTALLED_APPS = [a for a in settings.INSTALLED_APPS if a != "django_tasks"]
    assert "django_pgqueue.E011" in ids(check_task_backends())


def test_hints_point_at_the_documentation_url():
    from django_pgqueue.docs import FALLBACK_BASE, docs_site_url, docs_url

    with override_settings(PGQUEUE={"BATCH_SIZE": 0}):
        [message] = check_settings()
    assert message.hint.endswith(docs_url("settings", "pgqueue-keys"))
    assert docs_site_url("settings").startswith("https://")
    # pyproject.toml's [project.urls] and the fallback agree.
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert pyproject["project"]["urls"]["Documentation"] == FALLBACK_BASE


def test_the_checks_need_no_contrib_app_the_quickstart_does_not_list():
    """Django 6.0 refuses django.contrib.postgres's ArrayField without that app in
    INSTALLED_APPS (postgres.E005); no model of ours may need an app the quickstart
    does not tell users to add, or every worker stops at its system checks."""
    from django.conf import settings
    from django.core import checks

    assert "django.contrib.postgres" not in settings.INSTALLED_APPS
    problems = [e for e in checks.run_checks() if e.level >= checks.ERROR]
    assert problems == []
