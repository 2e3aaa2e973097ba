"""A webhook attempt is a ``deliver`` span, and the request carries its traceparent."""

from __future__ import annotations

import pytest

from django_pgqueue import send_event

from ..support.tracing_fixtures import spans  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("webhooks_conf")]


def test_deliveries_send_traceparent_of_their_span(
    spans,  # noqa: F811
    receiver,
    make_endpoint,
    run_worker,
    settings,
):
    from opentelemetry.trace import SpanKind

    make_endpoint(receiver.url("/ok"))
    settings.PGQUEUE = {**settings.PGQUEUE, "TRACING": True}
    send_event("order.paid", {"order_id": 1})
    run_worker()
    [request] = receiver.hits("/ok")
    headers = {k.lower(): v for k, v in request.headers.items()}
    [deliver] = [s for s in spans.get_finished_spans() if s.name == "deliver order.paid"]
    assert deliver.kind == SpanKind.CLIENT
    assert deliver.attributes["http.response.status_code"] == 200
    version, trace_id, span_id, _flags = headers["traceparent"].split("-")
    assert version == "00"
    assert trace_id == f"{deliver.context.trace_id:032x}"
    assert span_id == f"{deliver.context.span_id:016x}"
