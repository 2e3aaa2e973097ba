"""The demo's two customers: each receiver only ever sees its own customer's events."""

from __future__ import annotations

import io

import pytest

from testproject.demo.webhook_demo import CUSTOMER_EVENTS, CUSTOMERS, run_webhook_demo

pytestmark = pytest.mark.django_db(transaction=True)


def test_each_customer_receiver_sees_only_its_own_events():
    out = io.StringIO()
    counts = run_webhook_demo(out)
    for uid in CUSTOMERS:
        assert counts[uid]["customers"] == [uid]
        assert counts[uid]["succeeded"] == counts[uid]["verified"] == CUSTOMER_EVENTS
    for name in ("verifying", "flaky", "dead"):
        assert counts[name]["customers"] == []
    assert "saw the events of: demo_acme" in out.getvalue()
    # The customers' orders came in through the HTTP API on a real server.
    assert "orders through the HTTP API: POST http://127.0.0.1:" in out.getvalue()
