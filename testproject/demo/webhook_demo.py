"""The webhook part of ``manage.py pgqueue_demo``.

Three receivers on 127.0.0.1: one that verifies every signature, one that fails its
first requests and one that is dead (always 500). Events fan out to all three; a
worker drains them with a short retry schedule and cool-down so the whole story fits
in a few seconds: retries succeed on the flaky one, the dead one trips its circuit
breaker and its deliveries end in the dead-letter queue.

Two customers (applications ``demo_acme`` and ``demo_globex``) each have a verifying
receiver of their own and get their own orders: each receiver only ever sees its own
customer's events, and the global receivers none of them (docs/multi-tenant.md).

The customers' orders come in through the HTTP API (docs/http-api.md), as a service
in another language would send them: a real server (gunicorn, two worker processes)
serves the project on the demo's database, and the orders are ``POST /events`` with
an API key made by ``pgqueue_api_key``. Without gunicorn or the API's extra, they are
sent with ``send_event`` instead, and the demo says so.
"""

from __future__ import annotations

import io
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.db.models import Count
from django.test import override_settings

from django_pgqueue import send_event
from django_pgqueue.bench.server import Server, api_server_unavailable
from django_pgqueue.models import Application, Delivery, DeliveryAttempt, Endpoint
from django_pgqueue.worker import Worker
from testproject.demo import receivers

#: Marks the demo's endpoints, so a new run replaces the previous run's.
DESCRIPTION = "pgqueue demo receiver"
EVENTS = 20
#: The dead receiver only subscribes to refunds, so its story stays short.
REFUNDS = 2
FLAKY_FAILURES = 6
#: The demo's customers (application uids) and the orders each gets.
CUSTOMERS = ("demo_acme", "demo_globex")
CUSTOMER_EVENTS = 3

#: Fast settings for the demo drain only: retries within a second, a short breaker.
DEMO_WEBHOOKS = {
    "ALLOW_NETWORKS": ["127.0.0.0/8"],
    "ALLOW_HTTP": True,
    "RETRY_SCHEDULE": [0.2, 0.5],
    "BREAKER_THRESHOLD": 3,
    "BREAKER_COOLDOWN": 0.5,
    "BREAKER_MAX_COOLDOWN": 1.0,
}


@dataclass
class DemoState:
    receiver: receivers.Receiver
    endpoints: dict[str, Endpoint]


def start(out: Any) -> DemoState:
    """Start the receivers and create their endpoints (events are sent in ``finish``)."""
    Endpoint.objects.filter(description=DESCRIPTION).delete()
    Application.objects.filter(uid__in=CUSTOMERS).delete()
    receiver = receivers.Receiver()
    endpoints = {
        name: Endpoint.objects.create(
            url=receiver.url(f"/{name}"), description=DESCRIPTION, event_types=types
        )
        for name, types in (("verifying", []), ("flaky", []), ("dead", ["order.refunded"]))
    }
    for uid in CUSTOMERS:
        customer = Application.objects.create(uid=uid, name=uid.removeprefix("demo_").title())
        endpoints[uid] = Endpoint.objects.create(
            url=receiver.url(f"/{uid}"),
            description=DESCRIPTION,
            application=customer,
            event_types=["order.*"],
        )
        receiver.routes[f"/{uid}"] = receivers.verifying(endpoints[uid].secret)
    receiver.routes["/verifying"] = receivers.verifying(endpoints["verifying"].secret)
    receiver.routes["/flaky"] = receivers.flaky(FLAKY_FAILURES)
    receiver.routes["/dead"] = receivers.status(500)
    out.write(f"Webhook receivers on {receiver.url()} (verifying, flaky, dead)")
    return DemoState(receiver, endpoints)


def finish(state: DemoState, out: Any, timeout: float = 60) -> str:
    """Send the events, drain them with a worker, stop the receivers; return a summary."""
    try:
        with override_settings(PGQUEUE={**settings.PGQUEUE, "WEBHOOKS": DEMO_WEBHOOKS}):
            started = time.monotonic()
            for i in range(EVENTS):
                send_event("order.paid", {"order_id": i, "amount_cents": 1000 + i})
            for i in range(REFUNDS):
                send_event("order.refunded", {"order_id": i})
            out.write(_send_customer_orders())
            _drain(state, timeout)
            seconds = time.monotonic() - started
        return _summary(state, seconds)
    finally:
        state.receiver.close()


def _send_customer_orders() -> str:
    """Each customer's orders, through the HTTP API when it can be served; says how."""
    orders = [
        (uid, {"customer": uid, "order_id": i}) for uid in CUSTOMERS for i in range(CUSTOMER_EVENTS)
    ]
    reason = api_server_unavailable()
    if reason:
        for uid, payload in orders:
            send_event("order.paid", payload, application=uid)
        return f"Sent the customers' {len(orders)} orders with send_event ({reason})"
    buffer = io.StringIO()
    call_command("pgqueue_api_key", "create", "--name", "demo", "--scope", "send", stdout=buffer)
    key = buffer.getvalue().strip().splitlines()[-1].strip()
    run = uuid.uuid4().hex[:8]  # idempotency keys are unique across runs of the demo
    started = time.monotonic()
    server = Server(
        workers=2, threads=2, cwd=settings.BASE_DIR, env={"DATABASE_URL": _database_url()}
    )
    try:
        server.start("/webhooks/api/openapi.json")
        url = server.url("/webhooks/api/events")
        with requests.Session() as session:
            session.headers["Authorization"] = f"Bearer {key}"
            for uid, payload in orders:
                response = session.post(
                    url,
                    json={"event_type": "order.paid", "payload": payload, "application": uid},
                    headers={"Idempotency-Key": f"demo-{run}-{uid}-{payload['order_id']}"},
                    timeout=30,
                )
                if response.status_code != 202:
                    raise RuntimeError(f"POST {url}: {response.status_code} {response.text[:500]}")
    finally:
        server.close()
    return (
        f"Sent the customers' {len(orders)} orders through the HTTP API: POST {url} "
        f"(gunicorn, 2 workers; {time.monotonic() - started:.1f}s with its start-up)"
    )


def _database_url() -> str:
    """DATABASE_URL naming the database this process uses (a test run's, too)."""
    base = urlsplit(settings.DATABASE_URL)
    return urlunsplit(base._replace(path="/" + connection.settings_dict["NAME"]))


def run_webhook_demo(out: Any) -> dict[str, Any]:
    """The whole webhook demo in one call; returns the counts the summary prints."""
    state = start(out)
    out.write(finish(state, out))
    return counts(state)


def _drain(state: DemoState, timeout: float) -> None:
    deliveries = Delivery.objects.filter(endpoint__in=state.endpoints.values())
    deadline = time.monotonic() + timeout
    while deliveries.filter(status__in=("pending", "failed", "in_progress")).exists():
        if time.monotonic() > deadline:
            break
        # A burst worker stops when nothing is due: an open circuit or a scheduled
        # retry makes the loop wait, then run the next burst.
        Worker(burst=True, concurrency=4, queues=["webhooks"], install_signal_handlers=False).run()
        time.sleep(0.1)


def counts(state: DemoState) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, endpoint in state.endpoints.items():
        endpoint.refresh_from_db()
        rows = Delivery.objects.filter(endpoint=endpoint)
        by_status = dict(rows.values_list("status").annotate(n=Count("id")))
        result[name] = {
            "succeeded": by_status.get("succeeded", 0),
            "retried": rows.filter(attempts__gt=1).count(),
            "dead": by_status.get("dead", 0),
            "attempts": DeliveryAttempt.objects.filter(delivery__in=rows).count(),
            "verified": sum(1 for r in state.receiver.hits(f"/{name}") if r.verified),
            "breaker": endpoint.breaker_state,
            # Whose events this receiver saw (the "customer" of each payload, the
            # body's "data").
            "customers": sorted(
                {
                    json.loads(r.body)["data"].get("customer", "")
                    for r in state.receiver.hits(f"/{name}")
                }
                - {""}
            ),
        }
    return result


def _summary(state: DemoState, seconds: float) -> str:
    lines = [
        f"\n=== Webhooks ({EVENTS} order.paid to all, {REFUNDS} order.refunded to the "
        f"dead receiver; {seconds:.1f}s) ==="
    ]
    for name, c in counts(state).items():
        line = (
            f"  {name:<11} succeeded {c['succeeded']:>3}  retried {c['retried']:>3}  "
            f"dead {c['dead']:>3}  attempts {c['attempts']:>3}  breaker {c['breaker']}"
        )
        if name == "verifying" or name in CUSTOMERS:
            line += f"  (signatures verified: {c['verified']})"
        if name in CUSTOMERS:
            line += f"  saw the events of: {', '.join(c['customers']) or 'nobody'}"
        lines.append(line)
    return "\n".join(lines)
