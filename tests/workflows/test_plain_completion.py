"""A completion skips the workflow release only for a batch the claim said holds no step.

The claim returns ``step`` (``workflow_id IS NOT NULL``) with every job, the job
source copies it onto the outcome, and ``jobs.store.complete`` takes the plain
statement (no release CTEs to plan) only when no outcome of the batch is a step or
of unknown kind. These tests run the real claim and completion on a connection
opened as the worker opens its own, and read which statement ran from the
statements psycopg sent.
"""

from __future__ import annotations

from typing import Any

import pytest

from django_pgqueue import sql
from django_pgqueue.db import connect
from django_pgqueue.models import Job
from django_pgqueue.outcomes import JobOutcome
from django_pgqueue.worker.runner import TaskRunner
from django_pgqueue.worker.sources import JobSource, tagged
from django_pgqueue.workflows import call, chain
from testproject.demo import tasks

pytestmark = pytest.mark.django_db(transaction=True)

PARAMS = {"all_queues": True, "queues": [], "limit": 10, "lease": 60.0, "worker_id": "t"}


class Statements:
    """The connection's ``execute``, recording the text of every statement sent."""

    def __init__(self, conn: Any) -> None:
        self.sent: list[str] = []
        self._execute = conn.execute
        conn.execute = self

    def __call__(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        self.sent.append(str(query))
        return self._execute(query, *args, **kwargs)

    def completions(self) -> list[str]:
        return [q for q in self.sent if q.startswith("/* pgqueue:complete */")]


def _succeeded(item: Any) -> JobOutcome:
    """A success as the job source hands it to the completer (tagged from its row)."""
    return tagged(item, JobOutcome(item.id, item.token, "succeeded", result_json="null"))


def test_the_claim_tells_a_step_from_a_plain_job():
    plain = tasks.add.enqueue(1, 2)
    chain(call(tasks.add, 1, 1), call(tasks.add, 2, 2)).enqueue()
    source = JobSource(TaskRunner("plain-test", 60.0))
    with connect("plain-test", prepare=True) as conn:
        claimed = {item.id: item.step for item in source.claim(conn, PARAMS)}
    assert claimed.pop(int(plain.id)) is False
    # The chain's first step; the second is still waiting, so not claimed.
    (step_id,) = claimed
    assert claimed[step_id] is True
    assert Job.objects.get(pk=step_id).workflow_id is not None


def test_a_batch_of_plain_jobs_skips_the_release_and_a_step_takes_it():
    plain = [int(tasks.add.enqueue(i, i).id) for i in range(3)]
    chain(call(tasks.add, 1, 1), call(tasks.add, 2, 2)).enqueue()
    source = JobSource(TaskRunner("plain-test", 60.0))
    with connect("plain-test", prepare=True) as conn:
        items = {item.id: item for item in source.claim(conn, PARAMS)}
        step_id = next(job_id for job_id, item in items.items() if item.step)
        statements = Statements(conn)

        # Plain jobs only: the statement without the release.
        written = source.write_outcomes(conn, [_succeeded(items[i]) for i in plain])
        assert written == set(plain)
        assert statements.completions()[-1] in (
            sql.COMPLETE_PLAIN_COUNTED_JOBS,
            sql.COMPLETE_PLAIN_JOBS,
        )
        assert "ended AS" not in statements.completions()[-1]

        # A step (even beside plain jobs) takes the release: its child becomes due.
        assert source.write_outcomes(conn, [_succeeded(items[step_id])]) == {step_id}
        assert statements.completions()[-1] in (sql.COMPLETE_COUNTED_JOBS, sql.COMPLETE_JOBS)
    child = Job.objects.get(workflow_id=Job.objects.get(pk=step_id).workflow_id, status="pending")
    assert child.pk != step_id


def test_an_outcome_its_claim_did_not_describe_takes_the_release():
    """An outcome built without its claimed row (``step`` unknown) must not skip a
    release it might need: the default is the full statement."""
    chain(call(tasks.add, 1, 1), call(tasks.add, 2, 2)).enqueue()
    source = JobSource(TaskRunner("plain-test", 60.0))
    with connect("plain-test", prepare=True) as conn:
        (item,) = source.claim(conn, PARAMS)
        wf_step = item.id
        statements = Statements(conn)
        outcome = JobOutcome(item.id, item.token, "succeeded", result_json="null")
        assert source.write_outcomes(conn, [outcome]) == {wf_step}
        assert statements.completions()[-1] in (sql.COMPLETE_COUNTED_JOBS, sql.COMPLETE_JOBS)
    workflow_id = Job.objects.get(pk=wf_step).workflow_id
    assert Job.objects.filter(workflow_id=workflow_id, status="pending").count() == 1
