"""An unlogged queue after a database crash: it comes back empty (and usable), while a
logged queue, the registry and the unlogged queue's archive keep every message."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from types import SimpleNamespace

import psycopg
import pytest

from ..conftest import REPO

pytestmark = [pytest.mark.fault, pytest.mark.timeout(180)]


def _manage(url: str, *args: str) -> str:
    """Run a management command in a child with Django set up against ``url``."""
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "testproject.settings"}
    proc = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _django(url: str, code: str) -> str:
    """Run ``code`` in a child with Django set up against ``url``; return its stdout."""
    return _manage(url, "shell", "-v", "0", "-c", code)


def _count(dsn: str, table: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]


@pytest.fixture
def queue_db(fault_pg):
    """A migrated database of its own on the session's private cluster."""
    name = f"mq_{uuid.uuid4().hex[:10]}"
    fault_pg.create_database(name)
    _manage(fault_pg.url(name), "migrate", "--no-input", "-v", "0")
    return SimpleNamespace(url=fault_pg.url(name), dsn=fault_pg.dsn(name))


def test_unlogged_queue_is_emptied_by_a_crash_and_logged_queue_is_intact(queue_db, fault_pg):
    cluster_db = queue_db
    _django(
        cluster_db.url,
        "from django_pgqueue import mq\n"
        "mq.create('fast', unlogged=True); mq.create('safe')\n"
        "mq.send_batch('fast', [{'n': n} for n in range(100)])\n"
        "mq.send_batch('safe', [{'n': n} for n in range(100)])\n"
        "mq.archive('fast', [1, 2, 3])\n",
    )
    with psycopg.connect(cluster_db.dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")  # the unlogged pages are on disk too: the crash, not
    assert _count(cluster_db.dsn, "pgqueue_mq_q_fast") == 97  # a lost write, empties it

    fault_pg.crash_restart()

    assert _count(cluster_db.dsn, "pgqueue_mq_q_fast") == 0
    assert _count(cluster_db.dsn, "pgqueue_mq_a_fast") == 3
    assert _count(cluster_db.dsn, "pgqueue_mq_q_safe") == 100
    out = _django(
        cluster_db.url,
        "from django_pgqueue import mq\n"
        "print(sorted(q.name for q in mq.list_queues()))\n"
        "print(mq.metrics('safe').queue_length, mq.metrics('fast').queue_length)\n"
        "mid = mq.send('fast', {'after': 'crash'})\n"
        "print(mid, mq.read('fast')[0].message)\n",
    )
    # The unlogged sequence restarted too: ids begin again at 1 (the archive allows that).
    assert out.split("\n")[:3] == ["['fast', 'safe']", "100 0", "1 {'after': 'crash'}"]
