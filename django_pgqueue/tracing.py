"""OpenTelemetry spans for enqueue, claim, run and deliver (the ``[otel]`` extra).

Off unless ``PGQUEUE["TRACING"]`` is true and ``opentelemetry-api`` is installed; the
project configures its SDK and exporter as usual. Then:

* ``enqueue <task>`` (PRODUCER) surrounds ``enqueue()``; the current trace context
  (``traceparent``/``tracestate``) is written into the job's ``trace_context`` in the
  caller's transaction, so it exists exactly when the job does;
* ``claim <source>`` surrounds each claim statement of a worker, and reads the claimed
  jobs' stored contexts in one more statement over the claim connection;
* ``run <task>`` (CONSUMER) surrounds each attempt, as a child of the enqueue span:
  the run continues the trace that enqueued it, across processes and hosts;
* ``deliver <event type>`` (CLIENT) surrounds each webhook attempt, and the request
  carries ``traceparent`` (W3C Trace Context) so the receiver can join the trace.

Each wrapper costs one settings lookup when tracing is off. The statements are
the stores': the job store's ``store_trace_context`` at enqueue and, after a
claim, the source's ``trace_contexts`` hook (``worker.sources.Source``); this
module runs no SQL of its own and knows no source by name.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .conf import get_settings
from .jobs import store

F = TypeVar("F", bound=Callable[..., Any])

logger = logging.getLogger("django_pgqueue.tracing")

TRACER_NAME = "django_pgqueue"

#: Stored contexts of claimed jobs, by id, until their attempt starts. A row released
#: unstarted (shutdown) leaves its entry; the oldest go beyond this many.
MAX_PENDING_CONTEXTS = 10_000
_claimed_contexts: OrderedDict[int, dict[str, str]] = OrderedDict()
_claimed_lock = threading.Lock()


def enabled() -> bool:
    """Whether to trace: the setting is on and the OpenTelemetry API is importable."""
    if not get_settings().TRACING:
        return False
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return False
    return True


def _tracer() -> Any:
    from opentelemetry import trace

    from .__about__ import __version__

    return trace.get_tracer(TRACER_NAME, __version__)


def current_carrier() -> dict[str, str]:
    """The current trace context as W3C headers (``traceparent``, ``tracestate``)."""
    from opentelemetry.propagate import inject

    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier


def _context_from(carrier: Mapping[str, str] | None) -> Any:
    from opentelemetry.propagate import extract

    return extract(dict(carrier or {}))


# -- enqueue -----------------------------------------------------------------------------


def traced_enqueue(method: F) -> F:
    """Wrap ``PgQueueBackend.enqueue`` in an ``enqueue`` span and store its context."""

    @functools.wraps(method)
    def enqueue(backend: Any, task: Any, args: Any, kwargs: Any) -> Any:
        if not enabled():
            return method(backend, task, args, kwargs)
        from opentelemetry.trace import SpanKind

        with _tracer().start_as_current_span(
            f"enqueue {task.name}", kind=SpanKind.PRODUCER
        ) as span:
            span.set_attribute("messaging.system", "django_pgqueue")
            span.set_attribute("messaging.destination.name", task.queue_name)
            span.set_attribute("pgqueue.task", task.module_path)
            result = method(backend, task, args, kwargs)
            span.set_attribute("messaging.message.id", str(result.id))
            carrier = current_carrier()
            if carrier:
                store.store_trace_context(int(result.id), carrier)
            return result

    return enqueue  # type: ignore[return-value]


# -- claim -------------------------------------------------------------------------------


def traced_claim(method: F) -> F:
    """Wrap ``Worker._claim``: a ``claim`` span, and the claimed rows' stored contexts.

    A source whose rows carry a trace context says so with its ``trace_contexts``
    hook (``worker.sources.Source``); the hook reads them over the connection the
    claim ran on, which the claim hands to the source (``_ReadsTraceContexts``).
    """

    @functools.wraps(method)
    def claim(worker: Any, source: Any, params: Any, limit: int) -> list[Any]:
        if not enabled():
            return method(worker, source, params, limit)
        with _tracer().start_as_current_span(f"claim {source.name}") as span:
            span.set_attribute("pgqueue.limit", limit)
            if getattr(source, "trace_contexts", None) is not None:
                source = _ReadsTraceContexts(source)
            items: list[Any] = method(worker, source, params, limit)
            span.set_attribute("pgqueue.claimed", len(items))
            return items

    return claim  # type: ignore[return-value]


class _ReadsTraceContexts:
    """A source whose claim also keeps the claimed rows' stored trace contexts, read
    by its ``trace_contexts`` hook on the claim's own connection (one statement,
    primary-key lookups), until each row's run starts."""

    def __init__(self, source: Any) -> None:
        self._source = source

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)

    def claim(self, conn: Any, params: Any) -> list[Any]:
        items: list[Any] = self._source.claim(conn, params)
        if items:
            try:
                rows = self._source.trace_contexts(conn, [item.id for item in items])
            except Exception as exc:
                # The rows are claimed: run them, in traces of their own, rather than
                # leave them to lapse (an attempt more each). The next claim meets
                # the failure again, and reconnects.
                logger.warning("Reading the claimed rows' trace contexts failed (%s)", exc)
                return items
            with _claimed_lock:
                for row_id, carrier in rows:
                    _claimed_contexts[row_id] = carrier
                while len(_claimed_contexts) > MAX_PENDING_CONTEXTS:
                    _claimed_contexts.popitem(last=False)
        return items


# -- run ---------------------------------------------------------------------------------


def traced_run(method: F) -> F:
    """Wrap ``TaskRunner.run``: a ``run`` span continuing the job's enqueue trace."""

    @functools.wraps(method)
    def run(runner: Any, job: Any) -> Any:
        if not enabled():
            return method(runner, job)
        from opentelemetry.trace import SpanKind, Status, StatusCode

        with _claimed_lock:
            carrier = _claimed_contexts.pop(job.id, None)
        with _tracer().start_as_current_span(
            f"run {job.task_path.rpartition('.')[2]}",
            context=_context_from(carrier),
            kind=SpanKind.CONSUMER,
        ) as span:
            span.set_attribute("messaging.system", "django_pgqueue")
            span.set_attribute("messaging.destination.name", job.queue_name)
            span.set_attribute("messaging.message.id", str(job.id))
            span.set_attribute("pgqueue.task", job.task_path)
            span.set_attribute("pgqueue.attempt", job.attempts)
            outcome = method(runner, job)
            span.set_attribute("pgqueue.outcome", str(outcome.status))
            if outcome.last_error and outcome.status in ("failed", "dead"):
                span.set_status(Status(StatusCode.ERROR, outcome.last_error[:200]))
            return outcome

    return run  # type: ignore[return-value]


# -- deliver -----------------------------------------------------------------------------


def traced_delivery(method: F) -> F:
    """Wrap ``DeliverySource.run``: a ``deliver`` span around the webhook attempt."""

    @functools.wraps(method)
    def run(source: Any, item: Any) -> Any:
        if not enabled():
            return method(source, item)
        from opentelemetry.trace import SpanKind, Status, StatusCode

        with _tracer().start_as_current_span(
            f"deliver {item.event_type}", kind=SpanKind.CLIENT
        ) as span:
            span.set_attribute("pgqueue.delivery_id", item.id)
            span.set_attribute("pgqueue.endpoint_id", item.endpoint_id)
            span.set_attribute("pgqueue.attempt", item.attempts)
            # A broker URL's password never reaches the tracing backend.
            from .webhooks.brokers.urls import masked

            span.set_attribute("url.full", masked(item.url))
            outcome = method(source, item)
            code = outcome.status_code
            if code is not None:
                span.set_attribute("http.response.status_code", code)
            if outcome.last_error:
                span.set_status(Status(StatusCode.ERROR, outcome.last_error[:200]))
            return outcome

    return run  # type: ignore[return-value]


def outgoing_headers(headers: Mapping[str, str] | None) -> Mapping[str, str] | None:
    """An endpoint's custom headers plus ``traceparent`` when a span is current."""
    if not enabled():
        return headers
    carrier = current_carrier()
    if not carrier:
        return headers
    return {**(headers or {}), **carrier}
