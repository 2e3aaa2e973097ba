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
