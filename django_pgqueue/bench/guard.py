"""Refuse to benchmark any database but the scratch one.

The benchmark truncates the job table, preloads tens of thousands of jobs and runs
workers that claim whatever is due. Pointing a database alias at the scratch database
by name is not proof that connections reach it: a project may name its database in
``OPTIONS`` (``dbname``, ``service``), which libpq prefers over ``NAME``, or keep the
queue on another alias (``PGQUEUE["DATABASE"]``). So every process of a run (the
parent once it switched, and each ``migrate`` and ``runworkers`` child before it does
anything) asks the server ``SELECT current_database()`` over both kinds of connection
the queue opens, Django's and the plain psycopg ones of the worker, and stops if any
answer differs.
"""

from __future__ import annotations

from django.db import connections

from ..conf import get_settings
from ..db import connect


class WrongDatabase(RuntimeError):
    """A connection of the queue reaches a database other than the scratch one."""


def check_scratch_database(expected: str, alias: str) -> None:
    """Raise :class:`WrongDatabase` unless the queue's connections reach ``expected``.

    Checks ``alias`` (the one the benchmark pointed at ``expected``) and the queue's
    alias ``PGQUEUE["DATABASE"]``, through Django and through ``db.connect``.
    """
    for name in dict.fromkeys([alias, get_settings().DATABASE]):
        with connections[name].cursor() as cursor:
            cursor.execute("SELECT current_database()")
            row = cursor.fetchone()
        connections[name].close()
        _compare(expected, name, "Django", row[0] if row else None)
        with connect("bench-guard", alias=name) as conn:
            row = conn.execute("SELECT current_database()").fetchone()
        _compare(expected, name, "psycopg", row[0] if row else None)


def _compare(expected: str, alias: str, via: str, reached: str | None) -> None:
    if reached != expected:
        raise WrongDatabase(
            f"database alias {alias!r} reaches database {reached!r} ({via} connection), "
            f"not the benchmark's scratch database {expected!r}; refusing to run against "
            f"it. Its settings choose the database some other way than NAME (OPTIONS "
            f"'dbname' or 'service', or PGQUEUE['DATABASE'] naming another alias): run "
            f"pgqueue_bench with settings in which NAME decides."
        )
