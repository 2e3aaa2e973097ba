"""Databases of a test's own, made empty and dropped afterwards, for tests that
migrate from nothing, and ``manage.py`` run against one in a subprocess."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
from django.db import connection
from psycopg import sql as pgsql

from django_pgqueue.db import connection_params

REPO = Path(__file__).resolve().parent.parent.parent


def manage(
    *args: str,
    url: str,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    fails: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``manage.py ARGS`` on the database at ``url`` (the test project's settings
    unless ``env`` says otherwise); it must succeed (or, with ``fails``, fail)."""
    child = {
        k: v for k, v in os.environ.items() if k not in ("QUEUE_DATABASE_URL", "PGQUEUE_DATABASE")
    }
    child.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="testproject.settings")
    child.update(env or {})
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=child,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert (done.returncode != 0) == fails, done.stdout + done.stderr
    return done


@contextlib.contextmanager
def scratch_databases(*suffixes: str) -> Iterator[list[str]]:
    """Empty databases named after the test database and each suffix, dropped on
    the way out; their URLs."""
    from ..conftest import database_url

    base = connection.settings_dict["NAME"]
    names = [f"{base}_{suffix}" for suffix in suffixes]
    admin = {**connection_params("default"), "dbname": "postgres"}

    def recreate(create: bool) -> None:
        with psycopg.connect(autocommit=True, **admin) as conn:
            for name in names:
                ident = pgsql.Identifier(name)
                conn.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
                if create:
                    conn.execute(pgsql.SQL("CREATE DATABASE {}").format(ident))

    recreate(True)
    try:
        yield [database_url().replace(f"/{base}", f"/{name}", 1) for name in names]
    finally:
        recreate(False)
