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
