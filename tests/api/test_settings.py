"""PGQUEUE["API"]: defaults, validation (check E001) and check W040."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_pgqueue.checks import check_api_body_limit, check_settings
from django_pgqueue.conf import API_DEFAULTS, validate


def test_the_defaults():
    assert validate({}).API == API_DEFAULTS


@pytest.mark.parametrize(
    ("api", "words"),
    [
        ("fast", "must be a dict"),
        ({"RATE": 5}, "Unknown key(s) in PGQUEUE['API']: RATE"),
        ({"RATE_LIMIT": 0}, "RATE_LIMIT'] must be a positive integer"),
        ({"RATE_WINDOW": 1.5}, "RATE_WINDOW'] must be a positive integer"),
        ({"RATE_WINDOW": 86401}, "at most 86400"),
        ({"MAX_BODY_BYTES": -1}, "MAX_BODY_BYTES'] must be a positive integer"),
        ({"MAX_BATCH": 1001}, "at most 1000"),
        ({"PAGE_SIZE": 600}, "must not exceed"),
        ({"MAX_PAGE_SIZE": True}, "MAX_PAGE_SIZE'] must be a positive integer"),
        ({"AUDIT_USER": ""}, "AUDIT_USER'] must be a user name or None"),
        ({"AUDIT_USER": 7}, "AUDIT_USER'] must be a user name or None"),
    ],
)
def test_bad_values_name_the_key(api, words, settings):
    with pytest.raises(ImproperlyConfigured) as error:
        validate({"API": api})
    assert words in str(error.value)
    settings.PGQUEUE = {"API": api}
    [message] = check_settings()
    assert message.id == "django_pgqueue.E001" and words in message.msg


def test_a_body_limit_above_djangos_is_w040(settings):
    settings.PGQUEUE = {"API": {"MAX_BODY_BYTES": 10 * 1024 * 1024}}
    [warning] = check_api_body_limit()
    assert warning.id == "django_pgqueue.W040"
    settings.PGQUEUE = {"API": {"MAX_BODY_BYTES": 1024}}
    assert check_api_body_limit() == []
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = None
    settings.PGQUEUE = {"API": {"MAX_BODY_BYTES": 10 * 1024 * 1024}}
    assert check_api_body_limit() == []
