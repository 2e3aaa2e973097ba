"""The per-key rate limit: state in PostgreSQL, so it holds across connections and
processes; 429 with Retry-After over it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from django.db import connections

from django_pgqueue.models import ApiKey

from ..conftest import REPO, database_url
from .conftest import API, ApiClient, problem_of

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


#: A child process: Django on the test database, ``N`` requests with one key through
#: Django's test client once the parent says go; prints its pid and what it was told.
CHILD = """
import json, os, pathlib, sys, time
import django
django.setup()
from django.conf import settings
from django.test import Client, override_settings
key, ready, go, count = sys.argv[1:5]
client = Client()
pathlib.Path(ready).touch()
deadline = time.monotonic() + 20
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.005)
answers = []
with override_settings(PGQUEUE={**settings.PGQUEUE, "API": {"RATE_WINDOW": __WINDOW__}}):
    for _ in range(int(count)):
        response = client.get(__PATH__, headers={"Authorization": "Bearer " + key})
        answers.append([response.status_code, response.get("Retry-After")])
print(json.dumps({"pid": os.getpid(), "answers": answers}))
"""
#: An hour's window: a request costs WINDOW / LIMIT = 6 minutes of allowance, so what
#: refills while the test runs (seconds) is far below one request.
WINDOW, LIMIT, PER_CHILD = 3600, 10, 8


def test_the_limit_holds_across_processes(api, api_conf, tenants, tmp_path):
    """Two child processes, each with its own connection, send 8 requests at once
    with one key allowed 10: 10 pass in all, the other 6 are 429 with Retry-After.
    Each child sent fewer than the limit, so a per-process limit would let all 16 in."""
    api_conf(RATE_WINDOW=WINDOW)
    client = api("read", rate_limit=LIMIT)
    code = CHILD.replace("__WINDOW__", str(WINDOW)).replace("__PATH__", repr(API + "applications"))
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
    }
    go = tmp_path / "go"
    ready = [tmp_path / f"ready-{i}" for i in range(2)]
    children = [
        subprocess.Popen(
            [sys.executable, "-c", code, client.key, str(flag), str(go), str(PER_CHILD)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for flag in ready
    ]
    try:
        deadline = time.monotonic() + 15
        while not all(flag.exists() for flag in ready) and time.monotonic() < deadline:
            time.sleep(0.01)
        go.touch()
        outputs = [child.communicate(timeout=20) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    reports = []
    for child, (out, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err[-2000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    assert len({r["pid"] for r in reports} | {os.getpid()}) == 3
    answers = [answer for r in reports for answer in r["answers"]]
    statuses = [status for status, _ in answers]
    assert statuses.count(200) == LIMIT and statuses.count(429) == 2 * PER_CHILD - LIMIT
    for status, retry_after in answers:
        if status == 429:
            # The next request's cost (6 minutes) minus the little that refilled.
            assert WINDOW / LIMIT - 60 <= int(retry_after) <= WINDOW / LIMIT + 1
    # The allowance is spent for this process too.
    problem_of(client.get("applications"), 429)


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


def test_retry_after_is_read_after_a_concurrent_request_moved_the_allowance(api, api_conf, tenants):
    """A request that waited for another connection's update of the key's allowance
    and was then refused must say when to retry from that update, not from the older
    allowance its statement's snapshot holds (it said "retry in 1 second")."""
    import psycopg

    api_conf(RATE_WINDOW=3600)
    client = api("read", rate_limit=10)  # one request costs 360 s of allowance
    assert client.get("applications").status_code == 200
    answers: list[object] = []

    def request() -> None:
        try:
            answers.append(ApiClient(client.key).get("applications"))
        finally:
            connections.close_all()

    with psycopg.connect(database_url(), autocommit=True) as other:
        with other.transaction():
            # Another request spends the whole allowance and holds the row meanwhile.
            other.execute("UPDATE pgqueue_api_rate SET tat = now() + interval '3600 seconds'")
            thread = threading.Thread(target=request)
            thread.start()
            time.sleep(0.5)  # the request's statement is waiting for this row's lock
        thread.join(10)
    refused = answers[0]
    problem_of(refused, 429)
    # The spent allowance frees the next request's 360 s after the window: 360 s.
    assert 300 <= int(refused["Retry-After"]) <= 361, refused["Retry-After"]
