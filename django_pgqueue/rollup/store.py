"""The rollup store: the one writer of ``pgqueue_rollup`` rows, and their reads.

* ``record_jobs``: the completer's batch of job outcomes, aggregated here into one
  row per queue and added to the current minute by one statement, in the
  transaction of the batch's completion (``worker/sources.JobSource``).
* ``sample_depth``: each queue's backlog, once a minute, by the first worker to ask.
* ``read``: a kind's minutes for the admin's charts; ``prune``: retention
  (``PGQUEUE["ROLLUP_RETENTION_SECONDS"]``, run by ``pgqueue_prune``).

Statements in ``sql/rollup.py``. Functions taking ``conn`` run on one of the
worker's autocommit psycopg connections (or the prune's).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connections

from .. import sql
from ..conf import get_settings
from ..db import array_literal, text_array_literal
from ..models.rollup import RollupKind
from ..states import Status
from . import histogram

_RETRIED = frozenset({Status.FAILED})
_FAILED = frozenset({Status.DEAD, Status.CANCELLED})


@dataclasses.dataclass(slots=True)
class _Minute:
    ok: int = 0
    failed: int = 0
    retried: int = 0
    wait: list[int] = dataclasses.field(default_factory=lambda: [0] * histogram.SIZE)
    run: list[int] = dataclasses.field(default_factory=lambda: [0] * histogram.SIZE)


def aggregate_jobs(outcomes: Iterable[Any]) -> dict[tuple[str, str], _Minute]:
    """One entry per queue of the written outcomes: counts and both histograms.

    A released attempt (``refund``: given back unrun) counts nothing.
    """
    rows: dict[tuple[str, str], _Minute] = {}
    for outcome in outcomes:
        if outcome.refund:
            continue
        key = (RollupKind.QUEUE.value, outcome.queue_name)
        row = rows.get(key)
        if row is None:
            row = rows[key] = _Minute()
        status = outcome.status
        if status == Status.SUCCEEDED:
            row.ok += 1
        elif status in _RETRIED:
            row.retried += 1
        elif status in _FAILED:
            row.failed += 1
        row.wait[histogram.bucket(outcome.wait)] += 1
        row.run[histogram.bucket(outcome.duration)] += 1
    return rows


def record(conn: Any, rows: dict[tuple[str, str], _Minute]) -> None:
    """Add ``rows`` to the current minute in one statement (nothing when empty)."""
    if not rows:
        return
    keys = sorted(rows)  # one lock order for every completer (sql.ROLLUP_RECORD)
    conn.execute(
        sql.ROLLUP_RECORD,
        {
            "kinds": array_literal([kind for kind, _ in keys]),
            "names": text_array_literal([name for _, name in keys]),
            "oks": array_literal([str(rows[k].ok) for k in keys]),
            "faileds": array_literal([str(rows[k].failed) for k in keys]),
            "retrieds": array_literal([str(rows[k].retried) for k in keys]),
            "waits": text_array_literal([histogram.literal(rows[k].wait) for k in keys]),
            "runs": text_array_literal([histogram.literal(rows[k].run) for k in keys]),
        },
    )


def record_jobs(conn: Any, outcomes: Sequence[Any]) -> None:
    """Count a batch of written job outcomes into their queues' current minute."""
    record(conn, aggregate_jobs(outcomes))


def sample_depth(conn: Any) -> None:
    """Write each job queue's backlog into the current minute, unless a worker did."""
    conn.execute(sql.ROLLUP_SAMPLE_DEPTH)


@dataclasses.dataclass(frozen=True, slots=True)
class RollupMinute:
    """One stored minute of one name, as the charts read it."""

    name: str
    minute: dt.datetime
    ok: int
    failed: int
    retried: int
    wait_hist: list[int]
    run_hist: list[int]
    depth: int | None


def read(kind: str, seconds: float, names: Sequence[str] | None = None) -> list[RollupMinute]:
    """The minutes of ``kind`` in the last ``seconds``, by name then minute."""
    with connections[get_settings().DATABASE].cursor() as cursor:
        cursor.execute(
            sql.ROLLUP_READ,
            {"kind": kind, "since": float(seconds), "names": list(names) if names else None},
        )
        return [RollupMinute(*row) for row in cursor.fetchall()]


def prune(conn: Any, age: float) -> int:
    """Delete the minutes older than ``age`` seconds; return how many went."""
    return int(conn.execute(sql.ROLLUP_PRUNE, {"age": float(age)}).rowcount)
