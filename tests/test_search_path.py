"""Built-ins are never resolved through the caller's search_path.

A function created earlier in the search path with an argument type closer to the
call's than the built-in's wins overload resolution: ``public.make_interval(secs
integer)`` beats ``pg_catalog.make_interval(..., secs double precision)`` for an
integer argument. So every queue statement calls the built-ins it passes arguments
to as ``pg_catalog.<name>`` (zero-argument ones such as ``now()`` cannot be
overloaded ahead of ``pg_catalog``, which is searched first unless a search path
names it later). The message-queue statements and the SQL API are held to the same
rule in tests/mq/test_doors.py.
"""

from __future__ import annotations

import re

import pytest

from django_pgqueue import sql
from django_pgqueue.models import Job
from django_pgqueue.testing import run_queued_jobs
from testproject.demo import tasks

from .support.planted import planted_functions

pytestmark = pytest.mark.django_db(transaction=True)

#: Built-ins the statements call with arguments.
WITH_ARGUMENTS = (
    "make_interval",
    "to_jsonb",
    "jsonb_build_object",
    "jsonb_array_length",
    "set_config",
    "pg_notify",
    "array_agg",
    "count",
    "generate_series",
    "round",
    "floor",
    "ceil",
    "min",
    "max",
)
UNQUALIFIED = re.compile(r"(?<![\w.])(" + "|".join(WITH_ARGUMENTS) + r")\(")


def _statements() -> dict[str, str]:
    return {
        name: value
        for name, value in vars(sql).items()
        if name.isupper() and isinstance(value, str) and "/* pgqueue:" in value
    }


def test_every_statement_qualifies_the_built_ins_it_passes_arguments_to():
    statements = _statements()
    assert len(statements) > 50  # the scan sees the statements
    unqualified = {
        name: sorted(set(UNQUALIFIED.findall(text)))
        for name, text in statements.items()
        if UNQUALIFIED.search(text)
    }
    assert unqualified == {}


PLANTED = [
    ("public.make_interval(secs integer)", "interval"),
    ("public.make_interval(secs numeric)", "interval"),
    ("public.to_jsonb(text)", "jsonb"),
]


@pytest.fixture
def planted():
    """Functions in public that would win over the built-ins for an unqualified call."""
    with planted_functions(PLANTED):
        yield


@pytest.mark.parametrize("prepared", [True, False], ids=["server-binding", "client-binding"])
def test_the_job_path_never_runs_a_planted_function(planted, settings, prepared):
    settings.PGQUEUE = {**settings.PGQUEUE, "PREPARED_STATEMENTS": prepared, "LEASE_SECONDS": 30}
    ok = tasks.add.enqueue(1, 2)
    failing = tasks.always_fails.enqueue(7)
    report = run_queued_jobs(retries="wait")  # claim, lease, complete, retry delay
    assert Job.objects.get(pk=int(ok.id)).status == "succeeded"
    job = Job.objects.get(pk=int(failing.id))
    # Its retry was scheduled through the statements under test. The first backoff is
    # about two seconds: on a loaded machine it can come due while the helper still
    # drains, and then the retry runs too (attempts 2, found flaky at 1).
    assert job.status in ("failed", "dead") and job.attempts >= 1
    assert report.outcomes
