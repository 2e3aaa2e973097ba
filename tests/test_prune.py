"""Retention: ``pgqueue_prune`` deletes old terminal rows in batches and keeps the DLQ."""

from __future__ import annotations

import datetime as dt
from io import StringIO

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.utils import timezone

from django_pgqueue.conf import validate
from django_pgqueue.maintenance import prune, retention_plan
from django_pgqueue.models import Delivery, DeliveryAttempt, Endpoint, Event, Job
from django_pgqueue.webhooks.signing import generate_secret

DAY = dt.timedelta(days=1)

pytestmark = pytest.mark.django_db(transaction=True)


def job(status: str, age_days: float, **fields) -> Job:
    at = timezone.now() - age_days * DAY
    finished = at if status in ("succeeded", "dead") else None
    return Job.objects.create(
        task_path="testproject.demo.tasks.noop",
        status=status,
        finished_at=fields.pop("finished_at", finished),
        updated_at=at,
        created_at=at,
        **fields,
    )


@pytest.fixture
def history() -> dict[str, Job]:
    return {
        "old_ok": job("succeeded", 8),
        "new_ok": job("succeeded", 1),
        "old_cancelled": job("cancelled", 31),
        "new_cancelled": job("cancelled", 10),
        "old_dead": job("dead", 100),
        "new_dead": job("dead", 2),
        "old_pending": job("pending", 100),
        "old_failed": job("failed", 100),
    }


def remaining() -> set[int]:
    return set(Job.objects.values_list("pk", flat=True))


def test_default_retention_keeps_recent_rows_and_the_dlq(history):
    report = prune()
    assert report.deleted["pgqueue_job"] == {"succeeded": 1, "cancelled": 1}
    gone = {history["old_ok"].pk, history["old_cancelled"].pk}
    assert remaining() == {j.pk for j in history.values()} - gone


def test_dry_run_counts_and_deletes_nothing(history):
    out = StringIO()
    call_command("pgqueue_prune", "--dry-run", stdout=out)
    text = out.getvalue()
    assert "Would delete from pgqueue_job: 1 cancelled, 1 succeeded." in text
    assert "Dead-lettered rows are kept" in text
    assert remaining() == {j.pk for j in history.values()}


def test_dead_rows_go_only_when_asked(history):
    call_command("pgqueue_prune", stdout=StringIO())
    assert Job.objects.filter(status="dead").count() == 2
    call_command("pgqueue_prune", "--dead-days", "200", stdout=StringIO())
    assert Job.objects.filter(status="dead").count() == 2
    out = StringIO()
    call_command("pgqueue_prune", "--include-dead", stdout=out)  # 30 days by default
    assert "1 dead" in out.getvalue()
    assert set(Job.objects.filter(status="dead").values_list("pk", flat=True)) == {
        history["new_dead"].pk
    }


def test_configured_retention_per_state(history, settings):
    settings.PGQUEUE = {
        **settings.PGQUEUE,
        "RETENTION": {"succeeded": None, "cancelled": 5 * 86400, "dead": dt.timedelta(days=1)},
    }
    assert retention_plan() == {"cancelled": 5 * 86400.0, "dead": 86400.0}
    report = prune()
    assert report.deleted["pgqueue_job"] == {"cancelled": 2, "dead": 2}
    assert Job.objects.filter(status="succeeded").count() == 2


def test_nothing_to_prune_when_every_state_is_kept(history, settings):
    settings.PGQUEUE = {
        **settings.PGQUEUE,
        "RETENTION": {"succeeded": None, "cancelled": None},
    }
    out = StringIO()
    call_command("pgqueue_prune", stdout=out)
    assert "Nothing to prune" in out.getvalue()
    assert Job.objects.count() == len(history)


def test_small_batches_walk_the_whole_table():
    old = [job("succeeded", 9).pk for _ in range(7)]
    kept = [job("pending", 9).pk for _ in range(3)] + [job("succeeded", 0).pk]
    report = prune(batch_size=2)
    assert report.total("pgqueue_job") == 7
    assert report.batches >= 4  # at most 2 rows per transaction
    assert remaining() == set(kept)
    assert not set(old) & remaining()


def test_a_row_replayed_after_it_was_selected_is_kept(monkeypatch):
    """The DELETE repeats the retention test: a row made pending meanwhile stays."""
    from django_pgqueue import maintenance, sql

    row = job("succeeded", 9)
    original = sql.prune_candidates

    def candidates_then_replay(table: str) -> str:
        Job.objects.filter(pk=row.pk).update(status="pending", finished_at=None)
        return original(table)

    monkeypatch.setattr(maintenance.sql, "prune_candidates", candidates_then_replay)
    assert prune().total() == 0
    assert Job.objects.get(pk=row.pk).status == "pending"


def test_webhook_deliveries_go_with_their_attempts_and_orphaned_events():
    endpoint = Endpoint.objects.create(url="https://example.com/hook", secret=generate_secret())
    old = timezone.now() - 9 * DAY

    def event(key: str) -> Event:
        return Event.objects.create(
            event_type="order.paid", payload={}, body="{}", msg_id=f"msg_{key}", created_at=old
        )

    done_event, busy_event = event("done"), event("busy")
    done = Delivery.objects.create(
        event=done_event, endpoint=endpoint, status="succeeded", finished_at=old, updated_at=old
    )
    DeliveryAttempt.objects.create(delivery=done, attempt=1, started_at=old, status_code=204)
    waiting = Delivery.objects.create(event=busy_event, endpoint=endpoint, status="pending")

    dry = prune(dry_run=True)
    assert dry.deleted["pgqueue_delivery"] == {"succeeded": 1}
    assert Delivery.objects.count() == 2

    report = prune()
    assert report.deleted["pgqueue_delivery"] == {"succeeded": 1}
    assert report.deleted["pgqueue_event"] == {"orphaned": 1}
    assert list(Delivery.objects.values_list("pk", flat=True)) == [waiting.pk]
    assert not DeliveryAttempt.objects.exists()
    assert list(Event.objects.values_list("pk", flat=True)) == [busy_event.pk]


@pytest.mark.parametrize(
    "retention, message",
    [
        ({"succeded": 1}, "Unknown key"),
        ({"succeeded": -1}, "must be a positive number"),
        ({"dead": "forever"}, "must be a number"),
        ([1], "must be a dict"),
    ],
)
def test_retention_setting_is_validated(retention, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        validate({"RETENTION": retention})


def test_retention_defaults_and_timedelta():
    conf = validate({"RETENTION": {"succeeded": dt.timedelta(hours=12)}})
    assert conf.RETENTION == {"succeeded": 43200.0, "cancelled": 30 * 86400.0, "dead": None}


def test_finished_workflows_go_with_their_edges_once_no_step_is_left():
    from django_pgqueue.models import Workflow as WorkflowRow
    from django_pgqueue.models import WorkflowEdge
    from django_pgqueue.workflows import Workflow
    from testproject.demo import tasks

    def chain(name: str) -> int:
        wf = Workflow(name)
        a = wf.add(tasks.add, 1, 1)
        wf.add(tasks.add, 2, 2, after=[a])
        return wf.enqueue().id

    finished, running, recent = chain("finished"), chain("running"), chain("recent")
    old = timezone.now() - 8 * DAY
    WorkflowRow.objects.filter(pk__in=[finished, running]).update(created_at=old)
    # The finished workflow's steps were pruned (or moved to the history) already.
    Job.objects.filter(workflow_id__in=[finished, recent]).update(
        status="succeeded", finished_at=old
    )
    Job.objects.filter(workflow_id=recent).update(finished_at=timezone.now())
    Job.objects.filter(workflow_id=finished).delete()

    dry = prune(dry_run=True)
    assert dry.deleted["pgqueue_workflow"] == {"finished": 1}
    assert dry.deleted["pgqueue_workflow_edge"] == {"finished": 1}
    assert WorkflowRow.objects.count() == 3

    report = prune()
    assert report.deleted["pgqueue_workflow"] == {"finished": 1}
    assert report.deleted["pgqueue_workflow_edge"] == {"finished": 1}
    # A workflow with a step left (running, or finished but not yet pruned) is kept.
    assert set(WorkflowRow.objects.values_list("pk", flat=True)) == {running, recent}
    assert set(WorkflowEdge.objects.values_list("workflow_id", flat=True)) == {running, recent}
