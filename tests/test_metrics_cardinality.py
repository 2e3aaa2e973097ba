"""``PGQUEUE["METRICS_ENDPOINTS"]``: webhook gauges per endpoint, per application, in
total or not at all, read from the database as a scrape reads them."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_pgqueue.checks import check_settings
from django_pgqueue.models.webhooks import Application, Endpoint

pytest.importorskip("prometheus_client")
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from django_pgqueue.metrics import _QueueGauges

pytestmark = pytest.mark.django_db(transaction=True)


def _samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(_QueueGauges())
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
def endpoints() -> list[Endpoint]:
    app = Application.objects.create(uid="cust_a")
    return [
        Endpoint.objects.create(url="https://a.example.com/1", application=app),
        Endpoint.objects.create(url="https://a.example.com/2", application=app, is_active=False),
        Endpoint.objects.create(url="https://global.example.com/"),
    ]


def _delivery_series(samples, prefix: str) -> dict:
    return {k: v for k, v in samples.items() if k[0].startswith(prefix)}


def test_per_endpoint_is_seven_series_each(endpoints):
    series = _delivery_series(_samples(), "pgqueue_endpoint_")
    assert len(series) == 7 * len(endpoints)
    assert series[("pgqueue_endpoint_active", (("endpoint", str(endpoints[1].pk)),))] == 0


@override_settings(PGQUEUE={"METRICS_ENDPOINTS": "application"})
def test_per_application_sums_the_endpoints_of_each(endpoints):
    samples = _samples()
    assert not _delivery_series(samples, "pgqueue_endpoint_")
    series = _delivery_series(samples, "pgqueue_application_")
    assert len(series) == 7 * 2  # cust_a, and "" for the endpoint of no application
    assert series[("pgqueue_application_active", (("application", "cust_a"),))] == 1
    assert series[("pgqueue_application_active", (("application", ""),))] == 1
    key = ("pgqueue_application_deliveries", (("application", "cust_a"), ("state", "due")))
    assert series[key] == 0


@override_settings(PGQUEUE={"METRICS_ENDPOINTS": "total"})
def test_total_is_seven_series_whatever_the_endpoints(endpoints):
    series = _delivery_series(_samples(), "pgqueue_all_endpoints_")
    assert len(series) == 7
    assert series[("pgqueue_all_endpoints_active", ())] == 2


@override_settings(PGQUEUE={"METRICS_ENDPOINTS": "off"})
def test_off_serves_no_endpoint_series(endpoints):
    samples = _samples()
    assert not any("endpoint" in name or "application" in name for name, _ in samples)
    assert ("pgqueue_workers", (("state", "alive"),)) in samples


def test_a_bad_mode_is_a_clear_check_error():
    with override_settings(PGQUEUE={"METRICS_ENDPOINTS": "customer"}):
        (error,) = check_settings()
    assert error.id == "django_pgqueue.E001"
    assert "PGQUEUE['METRICS_ENDPOINTS'] must be one of 'endpoint', 'application'" in error.msg


def test_metrics_listen_on_this_host_only_by_default():
    from django_pgqueue.management.commands.runworkers import Command

    parser = Command().create_parser("manage.py", "runworkers")
    assert parser.parse_args([]).metrics_addr == "127.0.0.1"
