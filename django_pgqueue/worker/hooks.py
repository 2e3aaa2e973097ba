"""Test-only pause points that make crash tests deterministic.

A worker started with ``PGQUEUE_TEST_PAUSE_AT=after_claim`` (a comma-separated
list of points) *and* ``PGQUEUE["TEST_HOOKS"] = True`` prints
``PAUSED <point> <job_id> <token>`` on stdout when it reaches that point and
blocks until a line arrives on stdin. A test reads the line, then kills the
process or injects its fault, then lets it go on. Both switches are required so
that an environment variable alone can never pause a production worker.

Points: ``after_claim`` (rows claimed, nothing run), ``before_task`` (about to
call the task), ``after_task`` (task returned, outcome not written),
``before_complete`` (completion write about to be sent), ``after_http_response``
(a webhook receiver answered, outcome not written), ``listener_reconnecting``,
``scheduler_tick`` (a tick's row inserted, its job not yet, transaction open),
``inside_claim_tx`` (a claim's rows claimed, its transaction still open).
"""

from __future__ import annotations

import os
import sys
import threading

from ..conf import get_settings

_lock = threading.Lock()


def armed_points() -> frozenset[str]:
    """The points armed in this process (empty unless both switches are on).

    Read once, when a worker component is built, and kept as its ``test_hooks``: a
    site checks ``if "<point>" in self.test_hooks`` (a set lookup on the hot path)
    and only then calls :func:`pause`.
    """
    raw = os.environ.get("PGQUEUE_TEST_PAUSE_AT", "")
    if not raw or not get_settings().TEST_HOOKS:
        return frozenset()
    return frozenset(p.strip() for p in raw.split(",") if p.strip())


def pause(point: str, *fields: object) -> None:
    """Announce ``point`` on stdout and wait for a line on stdin (the caller checked
    that ``point`` is armed)."""
    with _lock:  # one pause at a time, so lines never interleave
        sys.stdout.write(" ".join(["PAUSED", point, *map(str, fields)]) + "\n")
        sys.stdout.flush()
        sys.stdin.readline()
