"""The HTTP API's 422 for a refused endpoint URL is the customer's text: it names the URL's
host, never the address a host resolved to nor the operator's settings."""

from __future__ import annotations

import json

import pytest

from django_pgqueue.models import Endpoint

from .conftest import problem_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://[::ffff:10.1.2.3]/hook", "The address [::ffff:10.1.2.3] is a private or"),
        ("https://168.63.129.16/machine", "The address 168.63.129.16 is a private or reserved"),
        ("https://metadata.google.internal/", "The host 'metadata.google.internal' points to"),
    ],
)
def test_a_refused_url_is_explained_without_the_operators_details(api, tenants, url, shown):
    before = Endpoint.objects.count()
    body = problem_of(api("manage").post("endpoints", {"url": url}), 422)
    text = json.dumps(body)
    assert shown in text
    for detail in ("PGQUEUE", "ALLOW_", "allow-listed", "never allowed", "10.1.2.3,"):
        assert detail not in text, (detail, text)
    assert Endpoint.objects.count() == before  # nothing half-written
