"""Circuit changes made by a worker's completions reach its Prometheus counters."""

from __future__ import annotations

import pytest

from django_pgqueue import send_event
from testproject.demo import receivers

pytest.importorskip("prometheus_client")

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("webhooks_conf")]


def test_breaker_transitions_and_status_classes_are_counted(
    receiver, make_endpoint, run_worker, webhooks_conf, monkeypatch
):
    from django_pgqueue.metrics import WorkerMetrics
    from django_pgqueue.webhooks import delivery_source as delivery_worker
    from django_pgqueue.worker import observers

    metrics = WorkerMetrics(queue_gauges=False)
    monkeypatch.setattr(observers, "attempt_observers", [metrics.observe_attempt])
    monkeypatch.setattr(delivery_worker, "breaker_observers", [metrics.observe_breaker])
    webhooks_conf(RETRY_SCHEDULE=[600], BREAKER_THRESHOLD=1, BREAKER_COOLDOWN=600)
    receiver.routes["/down"] = receivers.status(503)
    make_endpoint(receiver.url("/down"))
    send_event("order.paid", {"order_id": 1})
    run_worker()
    text = metrics.exposition().decode()
    assert 'pgqueue_breaker_transitions_total{to_state="open"} 1.0' in text
    assert 'pgqueue_deliveries_total{status_class="5xx"} 1.0' in text
