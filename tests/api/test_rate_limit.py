"""The per-key rate limit: state in PostgreSQL, so it holds across connections and
processes; 429 with Retry-After over it."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections

from django_pgqueue.models import ApiKey

from .conftest import ApiClient, problem_of

pytestmark = pytest.mark.django_db(transaction=True)


def _in_thread(key: str) -> int:
    """One request from another thread, which has its own database connection."""
    statuses: list[int] = []

    def run() -> None:
        try:
            statuses.append(ApiClient(key).get("applications").status_code)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return statuses[0]


def test_the_limit_holds_across_connections(api, tenants):
    client = api("read", rate_limit=4)
    assert client.get("applications").status_code == 200
    assert _in_thread(client.key) == 200
    assert client.get("applications").status_code == 200
    assert _in_thread(client.key) == 200
    # Four requests on two connections spent the allowance: the fifth is refused on both.
    refused = client.get("applications")
    body = problem_of(refused, 429)
    assert body["code"] == "rate_limited"
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert _in_thread(client.key) == 429
    # Another key has its own allowance.
    assert api("read", rate_limit=4).get("applications").status_code == 200


def test_the_allowance_refills_after_retry_after(api, api_conf, tenants):
    api_conf(RATE_WINDOW=1, RATE_LIMIT=2)
    client = api("read")
    assert [client.get("applications").status_code for _ in range(2)] == [200, 200]
    refused = client.get("applications")
    problem_of(refused, 429)
    time.sleep(int(refused["Retry-After"]))
    assert client.get("applications").status_code == 200


def test_wrong_secrets_do_not_spend_a_keys_allowance(api, tenants):
    client = api("read", rate_limit=2)
    forged = ApiClient(client.key[:-1] + ("x" if client.key[-1] != "x" else "y"))
    for _ in range(5):
        problem_of(forged.get("applications"), 401)
    assert [client.get("applications").status_code for _ in range(2)] == [200, 200]


def test_no_limit_when_none_is_set(api, api_conf, tenants):
    api_conf(RATE_LIMIT=None)
    client = api("read")
    assert {client.get("applications").status_code for _ in range(30)} == {200}


def test_last_used_is_written_at_most_once_a_minute(api, tenants):
    client = api("read")
    client.get("applications")
    first = ApiKey.objects.get().last_used_at
    assert first is not None
    client.get("applications")
    assert ApiKey.objects.get().last_used_at == first
