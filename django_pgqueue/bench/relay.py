"""The relay rows of ``pgqueue_bench``: fan-out from PostgreSQL against the relay.

The question a firehose asks: ``F`` consumers want every event. Delivering from
PostgreSQL means ``F`` endpoints, ``F`` delivery rows and ``F`` POSTs per event (here
to the bench's local keep-alive receiver, its own process). The relay means one relay
endpoint, one delivery row and one publish per event to NATS JetStream; the broker
fans the stream out to its ``F`` consumers (``--n-webhooks`` / 2 events per run,
1,000 by default) (their reads are the broker's work, not
measured here). Both run in the same repetition, alternating their order, with one
``runworkers --burst`` at the default concurrency on the same scratch database.

Rows: events/s from the first attempt to the last finish (fully delivered for HTTP,
confirmed by the stream for the relay), for ``F`` = 1, 4 and 16, and the worker
process's CPU per event (user + system, from ``getrusage`` of the child), which
does not depend on how loaded the machine is as much as the rates do. Skipped with a
note when NATS is not reachable on 127.0.0.1:4222 or nats-py is missing.
"""

from __future__ import annotations

import asyncio
import resource
import socket
import subprocess
from typing import Any

from django.conf import settings
from django.db import connections
from django.test.utils import override_settings

from .. import sql
from .rows import DRAIN_SPAN, Row

#: The running benchmark (``core.Bench``), typed loosely: see bench/mq.py.
Bench = Any

NATS = ("127.0.0.1", 4222)
STREAM = "PGQ_BENCH_RELAY"
SUBJECT = "pgq.bench.relay"
FANOUTS = (1, 4, 16)


def unavailable() -> str:
    try:
        import nats  # noqa: F401
    except ImportError:
        return "nats-py is not installed (the brokers extra)"
    try:
        socket.create_connection(NATS, timeout=1).close()
    except OSError:
        return "NATS JetStream is not reachable on 127.0.0.1:4222"
    return ""


def _stream(create: bool) -> None:
    import nats

    async def run() -> None:
        nc = await nats.connect(f"nats://{NATS[0]}:{NATS[1]}")
        js = nc.jetstream()
        try:
            await js.delete_stream(STREAM)
        except Exception:  # noqa: S110 - not there yet
            pass
        if create:
            await js.add_stream(name=STREAM, subjects=[SUBJECT])
        await nc.close()

    asyncio.run(run())


def bench_relay(bench: Bench, webhooks_unavailable: str) -> None:
    """The relay rows (``webhooks_unavailable``: why the webhook engine cannot run
    here, from core, which imports this module)."""
    reason = webhooks_unavailable or unavailable()
    if reason:
        bench.notes.append(f"relay: skipped ({reason})")
        bench.out(f"   skipped: {reason}")
        return
    events = max(1, bench.n_webhooks // 2)
    rows = {}
    for fanout in FANOUTS:
        consumers = f"{fanout} consumer{'s' if fanout > 1 else ''}"
        rows[fanout] = (
            bench.add(
                Row(
                    "relay",
                    f"{consumers}: relay to NATS JetStream (1 publish per event)",
                    "events/s",
                    reference=f"HTTP from PostgreSQL ({fanout} endpoint(s))",
                    extra={"n": events},
                )
            ),
            bench.add(
                Row(
                    "relay",
                    f"{consumers}: worker CPU per event, relay",
                    "ms",
                    reference="HTTP from PostgreSQL",
                    better="lower",
                    extra={"n": events},
                )
            ),
        )
    with bench.webhook_receiver() as base:
        try:
            for rep in range(bench.repeat):
                for fanout in FANOUTS:
                    rate, cpu = rows[fanout]
                    for relay in (True, False) if rep % 2 == 0 else (False, True):
                        events_per_s, cpu_ms = _run(bench, base, fanout, events, relay=relay)
                        (rate.values if relay else rate.ref_values).append(events_per_s)
                        (cpu.values if relay else cpu.ref_values).append(cpu_ms)
                    bench.out(
                        f"   rep {rep + 1}, {fanout} consumer(s): relay "
                        f"{rate.values[-1]:,.0f} events/s ({cpu.values[-1]:.2f} ms CPU), "
                        f"HTTP {rate.ref_values[-1]:,.0f} events/s "
                        f"({cpu.ref_values[-1]:.2f} ms CPU)"
                    )
        finally:
            _stream(create=False)


def _run(bench: Bench, base: str, fanout: int, events: int, *, relay: bool) -> tuple[float, float]:
    """Send ``events`` events and drain them with one burst worker: (events/s, CPU ms/event)."""
    from ..models import Endpoint
    from ..webhooks.fanout import send_event
    from ..webhooks.signing import generate_secret

    bench.sql(
        "TRUNCATE pgqueue_delivery_attempt, pgqueue_delivery, pgqueue_event, "
        "pgqueue_endpoint CASCADE"
    )
    if relay:
        _stream(create=True)
        urls = [f"nats://{NATS[0]}:{NATS[1]}?subject={SUBJECT}"]
    else:
        urls = [f"{base}/hook/{i}" for i in range(fanout)]
    for url in urls:
        endpoint = Endpoint(url=url, relay=relay)
        endpoint.secret = generate_secret()
        endpoint.save(force_insert=True)
    payload = {"type": "bench", "data": {"id": 1}}
    with override_settings(PGQUEUE={**getattr(settings, "PGQUEUE", {}), "NOTIFY": False}):
        for _ in range(events):
            send_event("bench.event", payload)
    connections.close_all()
    bench.checkpoint(vacuum=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [*bench._manage(), "runworkers", "--burst", "--skip-checks"],
        env=bench.child_env(),
        check=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with bench.conn() as conn:
        done, span = conn.execute(DRAIN_SPAN.format(table=sql.DELIVERY_TABLE)).fetchone()
    expected = events * len(urls)
    if done != expected:
        raise RuntimeError(f"relay bench: {done} of {expected} deliveries succeeded")
    # The span excludes the worker's start-up, as the webhooks rows' does.
    return events / float(span), 1000 * cpu / events
