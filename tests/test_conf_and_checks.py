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
        ({"LEASE_SECONDS": -5}, r"PGQUEUE\['LEASE_SECONDS'\] must be a positive number, got -5"),
        ({"LEASE_SECONDS": "30"}, "must be a number"),
        ({"CONCURRENCY": 0}, "CONCURRENCY'] must be a positive integer"),
        ({"NOTIFY": "yes"}, "must be True or False"),
        ({"NOTIFY_CHANNEL": "x" * 64}, "at most 63"),
        ({"WEBHOOKS": {"ALLOW_NETWORKS": ["not-a-cidr"]}}, "not a CIDR"),
        ({"WEBHOOKS": {"RETRY_SCHEDULE": []}}, "non-empty list"),
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


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_check_e002_sqlite():
    sqlite = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
    with override_settings(DATABASES=sqlite):
        messages = check_settings()
    assert ids(messages) == ["django_pgqueue.E002"]
    assert "needs PostgreSQL" in messages[0].msg


def test_check_e002_missing_alias():
    with override_settings(PGQUEUE={"DATABASE": "queue"}):
        messages = check_settings()
    assert ids(messages) == ["django_pgqueue.E002"]
    assert "'queue', which is not in DATABASES" in messages[0].msg


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
