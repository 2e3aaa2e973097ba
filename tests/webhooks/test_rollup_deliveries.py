"""Webhook deliveries in the console's rollup: per endpoint and per application,
counted with the completions, latency in the histogram."""

from __future__ import annotations

import pytest

from django_pgqueue import send_event
from django_pgqueue.models import Application, Rollup
from django_pgqueue.rollup import histogram
from testproject.demo import receivers

pytestmark = pytest.mark.django_db(transaction=True)


def _sum(kind: str, name: str) -> tuple[int, int, int, int]:
    rows = list(Rollup.objects.filter(kind=kind, name=name))
    return (
        sum(r.ok for r in rows),
        sum(r.failed for r in rows),
        sum(r.retried for r in rows),
        sum(histogram.merge(r.run_hist for r in rows)),
    )


def test_deliveries_are_counted_per_endpoint_and_application(
    receiver, make_endpoint, run_worker, webhooks_conf
):
    webhooks_conf(RETRY_SCHEDULE=[0])  # two attempts: one retry, then dead
    app = Application.objects.create(uid="cust_1")
    receiver.routes["/ok"] = receivers.ok
    receiver.routes["/down"] = receivers.status(500)
    good = make_endpoint(receiver.url("/ok"), application=app)
    bad = make_endpoint(receiver.url("/down"), application=app)
    glob = make_endpoint(receiver.url("/ok"))
    for i in range(3):
        send_event("order.paid", {"n": i}, application="cust_1")
    send_event("order.paid", {"n": 9})
    run_worker(burst=True)
    assert _sum("endpoint", str(good.id)) == (3, 0, 0, 3)
    assert _sum("endpoint", str(bad.id)) == (0, 3, 3, 6)
    assert _sum("endpoint", str(glob.id)) == (1, 0, 0, 1)
    assert _sum("application", "cust_1") == (3, 3, 3, 9)
    assert not Rollup.objects.filter(kind="application").exclude(name="cust_1").exists()


def test_a_stale_delivery_completion_writes_and_counts_nothing(make_endpoint, receiver):
    # The counts ride in the completion's own statement, kept only if it wrote every
    # row: an outcome whose lease was lost (another token) is neither written nor
    # counted.
    import uuid

    from django_pgqueue.db import connect
    from django_pgqueue.models import Delivery
    from django_pgqueue.outcomes import DeliveryOutcome
    from django_pgqueue.webhooks.delivery_source import DeliverySource

    endpoint = make_endpoint(receiver.url("/ok"))
    send_event("order.paid", {"n": 1})
    delivery = Delivery.objects.get(endpoint=endpoint)
    stale = DeliveryOutcome(
        delivery.id, uuid.uuid4(), "succeeded", verdict="success", endpoint_id=endpoint.id
    )
    with connect("test") as conn:
        assert DeliverySource("w").write_outcomes(conn, [stale]) == set()
    assert not Rollup.objects.filter(kind="endpoint").exists()
    delivery.refresh_from_db()
    assert delivery.status == "pending"


def test_a_refused_rollup_write_never_holds_up_the_deliveries(
    receiver, make_endpoint, run_worker, caplog
):
    from django_pgqueue.models import Delivery

    from ..support.tables import table_away

    receiver.routes["/ok"] = receivers.ok
    make_endpoint(receiver.url("/ok"))
    send_event("order.paid", {"n": 1})
    with table_away("pgqueue_rollup"):
        run_worker(burst=True)
    assert list(Delivery.objects.values_list("status", flat=True)) == ["succeeded"]
    assert "Rollup write refused" in caplog.text
