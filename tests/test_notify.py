"""NOTIFY after commit: coalesced, never lost when the producing process exits at once."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.db import transaction

from django_pgqueue.db import connect
from django_pgqueue.notify import notifier
from testproject.demo import tasks

from .conftest import REPO, database_url, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def listener():
    conn = connect("test-listen", prepare=False)
    conn.execute("LISTEN pgqueue")
    yield conn
    conn.close()


def _drain(conn, timeout: float) -> int:
    return sum(1 for _ in conn.notifies(timeout=timeout))


def test_no_notify_before_commit_and_one_after(listener):
    with transaction.atomic():
        for i in range(100):
            tasks.add.enqueue(i, i)
        assert _drain(listener, 0.3) == 0  # nothing before the commit
    received = wait_for(lambda: _drain(listener, 0.2), 10, "the NOTIFY after commit")
    assert received >= 1
    assert _drain(listener, 0.3) <= 1  # coalesced: not one per job


def test_rolled_back_enqueue_sends_nothing(listener):
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.add.enqueue(1, 1)
        raise RuntimeError
    assert _drain(listener, 0.5) == 0


def test_a_producer_that_exits_at_once_still_wakes_workers(listener):
    code = (
        "import django; django.setup()\nfrom testproject.demo.tasks import add\nadd.enqueue(1, 2)\n"
    )
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
    }
    subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, check=True, timeout=60)
    assert wait_for(lambda: _drain(listener, 0.2), 10, "the exiting producer's NOTIFY")


def test_notify_failure_never_fails_enqueue(caplog):
    from django.db import connection

    notifier.close()
    connection.ensure_connection()
    original = connection.settings_dict["PORT"]
    connection.settings_dict["PORT"] = "1"  # new connections (the notifier's) are refused
    try:
        result = tasks.add.enqueue(1, 1)  # the row goes through the open connection
        notifier.flush()
    finally:
        connection.settings_dict["PORT"] = original
    assert tasks.add.get_result(result.id).args == [1, 1]
    assert "workers will poll" in caplog.text
