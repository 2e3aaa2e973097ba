"""``runworkers --metrics-port``: a real worker process scraped over HTTP."""

from __future__ import annotations

import urllib.request

import pytest
from django.utils import timezone

from django_pgqueue import send_event
from django_pgqueue.models import Delivery, Endpoint, Job, Status
from testproject.demo import receivers
from testproject.demo.tasks import add, always_fails

from .conftest import wait_for
from .support.receiver import Receiver

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.django_db(transaction=True)


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def test_a_worker_serves_counters_histograms_and_queue_gauges(worker_process):
    with Receiver() as receiver:
        endpoint = Endpoint.objects.create(url=receiver.url("/ok"))
        for i in range(3):
            add.enqueue(i, 1)
        always_fails.using(queue_name="poison").enqueue(7)
        add.using(run_after=timezone.now() + timezone.timedelta(hours=1)).enqueue(0, 0)
        send_event("order.paid", {"order_id": 1})
        port = receivers.free_port()
        worker = worker_process(
            "--metrics-port", str(port), "--metrics-addr", "127.0.0.1", "--concurrency", "2"
        )
        wait_for(
            lambda: (
                Job.objects.filter(status=Status.SUCCEEDED).count() == 3
                and Job.objects.filter(status=Status.DEAD).count() == 1
                and Delivery.objects.filter(status=Status.SUCCEEDED).count() == 1
            ),
            60,
            "the jobs and the delivery to finish",
        )
        samples = wait_for(lambda: _scrape_when_done(port), 30, "the outcomes in a scrape")
        assert worker.proc.poll() is None
    task = _path(always_fails)
    assert value(samples, "pgqueue_attempts_total", source="jobs", task=task, outcome="dead") == 1
    assert value(samples, "pgqueue_attempts_total", source="jobs", task=task, outcome="failed") == 2
    count = value(samples, "pgqueue_attempt_duration_seconds_count", source="jobs", task=_path(add))
    assert count == 3
    assert value(samples, "pgqueue_deliveries_total", status_class="2xx") == 1
    assert value(samples, "pgqueue_claimed_rows_total") == 7  # 3 + 3 attempts + 1 delivery
    assert value(samples, "pgqueue_notify_wakeups_total") is not None
    # Gauges from the database, read by this scrape.
    assert value(samples, "pgqueue_queue_rows", queue="default", state="deferred") == 1
    assert value(samples, "pgqueue_queue_rows", queue="poison", state="dead") == 1
    assert value(samples, "pgqueue_endpoint_active", endpoint=str(endpoint.pk)) == 1
    assert value(samples, "pgqueue_workers", state="alive") == 1
    # A new job shows in the next scrape without the worker doing anything.
    Job.objects.filter(status=Status.PENDING).update(next_attempt_at=timezone.now())
    later = scrape(port)
    assert value(later, "pgqueue_queue_rows", queue="default", state="deferred") == 0


def _scrape_when_done(port: int):
    """A scrape that counts the three successes (the port may not be open yet)."""
    samples = _try(port)
    if samples is None:
        return None
    done = value(
        samples, "pgqueue_attempts_total", source="jobs", task=_path(add), outcome="succeeded"
    )
    return samples if done == 3 else None


def _path(task) -> str:
    return task.module_path


def test_the_metrics_extra_is_named_when_missing(monkeypatch):
    import builtins

    from django.core.exceptions import ImproperlyConfigured

    from django_pgqueue.metrics import WorkerMetrics

    real_import = builtins.__import__

    def without_client(name, *args, **kwargs):
        if name == "prometheus_client":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_client)
    with pytest.raises(ImproperlyConfigured, match=r"django-pgqueue-engine\[metrics\]"):
        WorkerMetrics()


def test_processes_serve_one_port_each_and_gauges_from_the_first(worker_process):
    import signal

    add.using(run_after=timezone.now() + timezone.timedelta(hours=1)).enqueue(0, 0)
    port = receivers.free_port()
    while _port_taken(port + 1):
        port = receivers.free_port()
    supervisor = worker_process(
        "--processes", "2", "--metrics-port", str(port), "--metrics-addr", "127.0.0.1"
    )
    first = wait_for(lambda: _try(port), 60, "child 0's metrics")
    second = wait_for(lambda: _try(port + 1), 60, "child 1's metrics")
    assert value(first, "pgqueue_queue_rows", queue="default", state="deferred") == 1
    assert not any(name.startswith("pgqueue_queue_") for name, _ in second)
    assert value(second, "pgqueue_claimed_rows_total") is not None
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0


def _try(port: int):
    try:
        return scrape(port)
    except OSError:
        return None


def _port_taken(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0
