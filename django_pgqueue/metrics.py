"""Prometheus metrics for ``runworkers --metrics-port`` (the ``[metrics]`` extra).

Per process, kept in memory and served by ``prometheus_client``'s HTTP server:

* ``pgqueue_attempts_total{source,task,outcome}`` -- finished attempts (outcome:
  succeeded, failed, dead, released, ...);
* ``pgqueue_attempt_duration_seconds{source,task}`` -- a histogram of run times;
* ``pgqueue_deliveries_total{status_class}`` -- webhook attempts by response class
  (2xx, 3xx, 4xx, 5xx, error: no response, refused: our SSRF settings);
* ``pgqueue_breaker_transitions_total{to_state}`` -- circuit changes this process's
  completions caused;
* ``pgqueue_claimed_rows_total`` and ``pgqueue_notify_wakeups_total`` -- read from
  the worker's own counters at scrape time.

Queue gauges are read from the database once per scrape (the admin dashboard's
statements): ``pgqueue_queue_rows{queue,state}`` (due, deferred, in_progress, lapsed,
dead), ``pgqueue_queue_oldest_due_seconds{queue}``, the same for webhook endpoints
(``pgqueue_endpoint_deliveries{endpoint,state}``, ``pgqueue_endpoint_circuit_open``,
``pgqueue_endpoint_active``) and ``pgqueue_workers{state}`` (alive, gone), and for message queues
``pgqueue_mq_messages{queue,state}`` (visible, in_flight, delayed) and
``pgqueue_mq_oldest_visible_seconds{queue}``.

``--processes N`` serves one port per child: child *k* listens on ``port + k``, and
only child 0 reads the queue gauges (they describe the database, not a process, so
N copies would only multiply the queries and the series). Prometheus' multiprocess
mode was not chosen: it needs a shared directory set before the first import, files
cleaned up when the supervisor replaces a crashed child, and it cannot serve the
per-scrape database gauges at all; a port per child keeps every process an ordinary
target whose counter resets ``rate()`` already understands.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections

from .conf import get_settings
from .outcomes import DeliveryOutcome

if TYPE_CHECKING:
    from .worker.worker import Worker

logger = logging.getLogger("django_pgqueue.worker")

#: Histogram buckets in seconds: from a no-op task to a long job.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)

QUEUE_STATES = ("due", "deferred", "in_progress", "lapsed", "dead")
#: A job queue's states: ``waiting`` counts its workflow steps whose parents have not
#: ended (docs/workflows.md); deliveries never wait, so their gauges do not have it.
JOB_STATES = ("waiting", *QUEUE_STATES)


def _require_client() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise ImproperlyConfigured(
            "--metrics-port needs prometheus_client: pip install 'django-pgqueue-engine[metrics]'"
        ) from None
    return prometheus_client


def status_class(outcome: DeliveryOutcome) -> str:
    """The response class of one delivery attempt."""
    error = outcome.error or ""
    if error.startswith("refused:") and "could not be resolved" not in error:
        return "refused"
    code = outcome.status_code
    if code is None:
        # A broker destination answers no HTTP status: its publish was confirmed or not.
        return "confirmed" if outcome.verdict == "success" else "error"
    return f"{int(code) // 100}xx"


class WorkerMetrics:
    """The metrics of one worker process, in a registry of their own."""

    def __init__(self, worker: Worker | None = None, *, queue_gauges: bool = True) -> None:
        client = _require_client()
        self.client = client
        self.worker = worker
        self.registry = client.CollectorRegistry(auto_describe=True)
        self.attempts = client.Counter(
            "pgqueue_attempts",
            "Finished attempts by source, task and outcome.",
            ["source", "task", "outcome"],
            registry=self.registry,
        )
        self.durations = client.Histogram(
            "pgqueue_attempt_duration_seconds",
            "Run time of finished attempts.",
            ["source", "task"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.deliveries = client.Counter(
            "pgqueue_deliveries",
            "Webhook delivery attempts by response class.",
            ["status_class"],
            registry=self.registry,
        )
        self.breaker = client.Counter(
            "pgqueue_breaker_transitions",
            "Circuit breaker changes caused by this process's completions.",
            ["to_state"],
            registry=self.registry,
        )
        self.registry.register(_WorkerCounters(self))
        if queue_gauges:
            self.registry.register(_QueueGauges())
        self.server: Any = None

    # -- observers -------------------------------------------------------------------

    def observe_attempt(self, worker_id: str, outcome: Any, label: str) -> None:
        self.attempts.labels(outcome.source, outcome.task_path, label).inc()
        self.durations.labels(outcome.source, outcome.task_path).observe(outcome.duration)
        # A relay batch is one attempt of the worker and one delivery attempt per
        # delivery in it (webhooks/relay_source.BatchOutcome.outcomes).
        for delivery in getattr(outcome, "outcomes", None) or (outcome,):
            if isinstance(delivery, DeliveryOutcome) and delivery.verdict != "none":
                self.deliveries.labels(status_class(delivery)).inc()

    def observe_breaker(self, old_state: str, new_state: str) -> None:
        self.breaker.labels(new_state).inc()

    # -- serving ---------------------------------------------------------------------

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:  # noqa: S104 - a scrape target
        """Serve ``/metrics`` on ``addr:port`` from a daemon thread."""
        started = self.client.start_http_server(port, addr=addr, registry=self.registry)
        self.server = started[0] if isinstance(started, tuple) else None
        logger.info("Serving Prometheus metrics on %s:%d", addr, port)

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def exposition(self) -> bytes:
        """The text a scrape returns (for tests and debugging)."""
        return bytes(self.client.generate_latest(self.registry))


class _WorkerCounters:
    """Counters the worker keeps anyway, read when scraped."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        worker = self.metrics.worker
        if worker is None:
            return
        yield CounterMetricFamily(
            "pgqueue_claimed_rows", "Rows this process claimed.", value=worker.claimed
        )
        wakeups = worker.listener.wakeups if worker.listener is not None else 0
        yield CounterMetricFamily(
            "pgqueue_notify_wakeups", "Wake-ups by a NOTIFY on the LISTEN connection.", wakeups
        )


class _QueueGauges:
    """Queue, endpoint and worker gauges, read from the database on each scrape."""

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        from .status import snapshot

        try:
            data = snapshot()
        except Exception as exc:
            logger.warning("Metrics: could not read the queue gauges (%s)", exc)
            return
        finally:
            close_old_connections()
        rows = GaugeMetricFamily(
            "pgqueue_queue_rows", "Job rows per queue and state.", labels=["queue", "state"]
        )
        oldest = GaugeMetricFamily(
            "pgqueue_queue_oldest_due_seconds",
            "How long the oldest due job has waited.",
            labels=["queue"],
        )
        for queue in data["queues"]:
            for state in JOB_STATES:
                rows.add_metric([queue["name"], state], queue[state])
            oldest.add_metric([queue["name"]], queue["oldest_due_seconds"] or 0.0)
        yield from _delivery_gauges(data["endpoints"], get_settings().METRICS_ENDPOINTS)
        workers = GaugeMetricFamily(
            "pgqueue_workers", "Workers with a heartbeat row.", labels=["state"]
        )
        alive = sum(1 for w in data["workers"] if w["alive"])
        workers.add_metric(["alive"], alive)
        workers.add_metric(["gone"], len(data["workers"]) - alive)
        paused = GaugeMetricFamily(
            "pgqueue_queue_paused", "1 for each paused job queue.", labels=["queue"]
        )
        for queue in data["paused_queues"]:
            paused.add_metric([queue["name"]], 1.0)
        yield from (rows, oldest, workers, paused, *_mq_gauges(data))


#: ``PGQUEUE["METRICS_ENDPOINTS"]`` -> (metric name prefix, label of the group).
_DELIVERY_GROUPS = {
    "endpoint": ("pgqueue_endpoint", "endpoint"),
    "application": ("pgqueue_application", "application"),
    "total": ("pgqueue_all_endpoints", None),
}


def _delivery_gauges(endpoints: list[dict[str, Any]], mode: str) -> Iterator[Any]:
    """Webhook gauges per endpoint, summed per application or over all, or none.

    Seven series per group (five delivery states, circuit, active): per endpoint that
    is 700,000 series for 100,000 endpoints, hence the coarser modes. Grouped, the
    circuit and active gauges count the endpoints (open circuits, enabled ones).
    """
    from prometheus_client.core import GaugeMetricFamily

    if mode == "off":
        return
    prefix, label = _DELIVERY_GROUPS[mode]
    labels = [label] if label else []
    noun = {"endpoint": "endpoint", "application": "application"}.get(label or "", "all")
    deliveries = GaugeMetricFamily(
        f"{prefix}_deliveries", f"Delivery rows per {noun} and state.", labels=[*labels, "state"]
    )
    circuit = GaugeMetricFamily(
        f"{prefix}_circuit_open",
        "1 when the endpoint's circuit is not closed."
        if mode == "endpoint"
        else f"Endpoints whose circuit is not closed, per {noun}.",
        labels=labels,
    )
    active = GaugeMetricFamily(
        f"{prefix}_active",
        "1 when the endpoint is enabled."
        if mode == "endpoint"
        else f"Enabled endpoints, per {noun}.",
        labels=labels,
    )
    sums: dict[tuple[str, ...], dict[str, float]] = {}
    for endpoint in endpoints:
        if mode == "endpoint":
            key: tuple[str, ...] = (str(endpoint["id"]),)
        elif mode == "application":
            key = (endpoint["application"] or "",)  # "": endpoints of no application
        else:
            key = ()
        group = sums.setdefault(key, dict.fromkeys((*QUEUE_STATES, "circuit", "active"), 0.0))
        for state in QUEUE_STATES:
            group[state] += endpoint[state]
        group["circuit"] += float(endpoint["breaker_state"] != "closed")
        group["active"] += float(endpoint["is_active"])
    for key, group in sums.items():
        for state in QUEUE_STATES:
            deliveries.add_metric([*key, state], group[state])
        circuit.add_metric(list(key), group["circuit"])
        active.add_metric(list(key), group["active"])
    yield from (deliveries, circuit, active)


MQ_STATES = ("visible", "in_flight", "delayed")


def _mq_gauges(data: dict[str, Any]) -> Iterator[Any]:
    """The message queues of a status snapshot as gauges."""
    from prometheus_client.core import GaugeMetricFamily

    messages = GaugeMetricFamily(
        "pgqueue_mq_messages", "Messages per message queue and state.", labels=["queue", "state"]
    )
    oldest = GaugeMetricFamily(
        "pgqueue_mq_oldest_visible_seconds",
        "How long the oldest visible message has waited to be read.",
        labels=["queue"],
    )
    for q in data["message_queues"]:
        for state in MQ_STATES:
            messages.add_metric([q["name"], state], q[state])
        oldest.add_metric([q["name"]], q["oldest_visible_seconds"] or 0.0)
    yield from (messages, oldest)


def enable(
    worker: Worker,
    port: int,
    *,
    slot: int | None = None,
    addr: str = "127.0.0.1",
) -> WorkerMetrics:
    """Serve this worker's metrics on ``addr:port`` (+ its ``--processes`` slot)."""
    from .webhooks.delivery_source import breaker_observers
    from .worker.observers import attempt_observers

    metrics = WorkerMetrics(worker, queue_gauges=not slot)
    attempt_observers.append(metrics.observe_attempt)
    breaker_observers.append(metrics.observe_breaker)
    metrics.serve(port + (slot or 0), addr)
    return metrics
