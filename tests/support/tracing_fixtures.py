"""An OpenTelemetry SDK with the in-memory exporter, installed once per test process
(the global tracer provider can be set only once)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

_exporter: Any = None


@pytest.fixture
def spans(settings: Any) -> Iterator[Any]:
    """Turn tracing on and collect finished spans: ``spans.get_finished_spans()``."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    global _exporter
    if _exporter is None:
        _exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)
    settings.PGQUEUE = {**settings.PGQUEUE, "TRACING": True, "POLL_INTERVAL": 0.05}
    _exporter.clear()
    yield _exporter
    _exporter.clear()
