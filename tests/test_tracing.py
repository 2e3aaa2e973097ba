"""OpenTelemetry: enqueue, claim and run spans, the run continuing the enqueue trace."""

from __future__ import annotations

import pytest

from django_pgqueue.models import Job
from testproject.demo.tasks import add, always_fails

from .support.tracing_fixtures import spans  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def by_name(exporter, prefix: str) -> list:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def test_the_run_continues_the_trace_that_enqueued_the_job(spans, run_worker):  # noqa: F811
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, StatusCode

    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("checkout") as request:
        result = add.enqueue(2, 3)
        failing = always_fails.enqueue(1)
    trace_id = request.get_span_context().trace_id
    stored = Job.objects.get(pk=result.id).trace_context
    assert stored["traceparent"].split("-")[1] == f"{trace_id:032x}"

    run_worker()
    [enqueue] = [
        s
        for s in by_name(spans, "enqueue add")
        if s.attributes["messaging.message.id"] == result.id
    ]
    assert (
        enqueue.kind == SpanKind.PRODUCER
        and enqueue.parent.span_id == request.get_span_context().span_id
    )
    [run] = by_name(spans, "run add")
    assert run.kind == SpanKind.CONSUMER
    assert run.context.trace_id == trace_id and run.parent.span_id == enqueue.context.span_id
    assert run.attributes["pgqueue.outcome"] == "succeeded"
    assert run.attributes["messaging.message.id"] == result.id
    claims = by_name(spans, "claim jobs")
    assert claims and sum(s.attributes["pgqueue.claimed"] for s in claims) >= 2
    # Every attempt of the failing job (a burst worker stops before a retry that is not
    # due yet) joins the same trace, and is marked as an error.
    runs = by_name(spans, "run always_fails")
    assert runs and {s.context.trace_id for s in runs} == {trace_id}
    assert all(s.status.status_code == StatusCode.ERROR for s in runs)
    assert len(runs) == Job.objects.get(pk=failing.id).attempts


def test_tracing_off_writes_no_context_and_no_span(settings, run_worker):
    pytest.importorskip("opentelemetry.sdk")
    settings.PGQUEUE = {**settings.PGQUEUE, "TRACING": False}
    result = add.enqueue(1, 1)
    assert Job.objects.get(pk=result.id).trace_context is None


def test_claimed_jobs_run_once_when_their_trace_contexts_cannot_be_read(
    spans,  # noqa: F811
    run_worker,
    monkeypatch,
):
    """The claim committed; reading its rows' trace contexts fails (the connection is
    lost in between). The jobs run now, each once, in traces of their own: not left
    leased until their leases lapse and claimed again with an attempt more."""
    from django_pgqueue.db import connect
    from django_pgqueue.jobs import store

    read = store.read_trace_contexts

    def lost_connection(conn, ids):
        with connect("trace-test-killer") as killer:
            (pid,) = conn.execute("SELECT pg_backend_pid()").fetchone()
            killer.execute("SELECT pg_terminate_backend(%s)", [pid])
        return read(conn, ids)

    monkeypatch.setattr(store, "read_trace_contexts", lost_connection, raising=True)
    ids = [add.enqueue(1, i).id for i in range(3)]
    run_worker(lease_seconds=30)
    assert (
        sorted(Job.objects.filter(pk__in=ids).values_list("status", "attempts"))
        == [("succeeded", 1)] * 3
    )
    assert len(by_name(spans, "run add")) == 3
