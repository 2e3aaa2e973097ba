"""Hostile webhook receivers cannot stop a worker (catalogue S3, receiver side).

Anyone who registers an endpoint controls what comes back. Each test points one
endpoint at a real misbehaving receiver on 127.0.0.1 (``tests/support/hostile.py``, raw
sockets) and three at a polite one, sends six events to all four, and runs a real
``Worker`` until every delivery has settled. Then:

* the worker still has every task thread it started with;
* each innocent delivery reached its receiver exactly once, even though it shared
  claims and completion batches with the hostile ones;
* nothing is lost: every delivery is terminal, or failed with a retry scheduled as
  the rules say (a capped ``Retry-After``, a parked endpoint), with one attempt-log
  row per attempt.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.utils import timezone

from ..conftest import wait_for
from ..support import hostile
from ..support.hostile import HostileReceiver
from ..support.receiver import Receiver

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120), pytest.mark.django_db(transaction=True)]

CONCURRENCY = 4
EVENTS = 6  # more than CONCURRENCY: some task thread reuses its kept-alive connection
INNOCENT_ENDPOINTS = 3
# Generous for the polite receiver, which shares this process (and its GIL) with the
# worker and the hostile receiver; the hostile cases that stall cost three of it.
TOTAL_TIMEOUT = 2.0
RESPONSE_CAP = 20_000
RETRY_AFTER_CAP = 600.0
WEBHOOKS: dict[str, Any] = {
    "ALLOW_NETWORKS": ["127.0.0.0/8"],
    "ALLOW_HTTP": True,
    "RETRY_SCHEDULE": [0, 0],  # three attempts, retried at once
    "RETRY_JITTER": 0,
    "RETRY_AFTER_CAP": RETRY_AFTER_CAP,
    "CONNECT_TIMEOUT": 1.0,
    "TOTAL_TIMEOUT": TOTAL_TIMEOUT,
    "RESPONSE_CAP": RESPONSE_CAP,
    "BREAKER_THRESHOLD": 1000,
}

# How a hostile delivery settles.
DELIVERED = "delivered"  # succeeded at its first attempt
DEAD = "dead"  # every attempt failed
RETRYING = "retrying"  # failed, next attempt far off (Retry-After, capped)
PARKED = "parked"  # the endpoint was switched off (410); waiting for it


@dataclass(frozen=True)
class Case:
    name: str
    behaviour: Callable[[], hostile.Behaviour]
    settles: str
    check: Callable[[list[Any]], None] | None = None  # on the hostile attempt rows


def _ok(*headers: tuple[str, str]) -> bytes:
    return hostile.response(200, list(headers), b"ok")


def _truncated_at_cap(attempts: list[Any]) -> None:
    for attempt in attempts:
        assert attempt.status_code == 200 and attempt.response_truncated
        assert len(attempt.response_body) <= RESPONSE_CAP


def _not_decompressed(attempts: list[Any]) -> None:
    _truncated_at_cap(attempts)
    for attempt in attempts:
        # The gzip bytes are stored as received; a decoded bomb would be all NUL.
        assert not attempt.response_body.startswith("\ufffd" * 100)
        assert attempt.response_headers.get("Content-Encoding") == "gzip"


def _failed_with(*texts: str) -> Callable[[list[Any]], None]:
    def check(attempts: list[Any]) -> None:
        for attempt in attempts:
            assert any(text in attempt.error for text in texts), attempt.error

    return check


def _visible_controls(attempts: list[Any]) -> None:
    for attempt in attempts:
        assert attempt.status_code == 200
        text = repr(attempt.response_headers)
        assert "\\\\x00" in text and "\x00" not in text
        assert "\x1b" not in text


def _resent_on_fresh_connection(attempts: list[Any]) -> None:
    notes = [a for a in attempts if a.error.startswith("note: ")]
    assert notes, "no attempt met a stale kept-alive connection"
    assert all(a.status_code == 200 and a.succeeded for a in attempts)


def _retry_after(value: str, status: int = 429) -> Callable[[], hostile.Behaviour]:
    return lambda: hostile.answer(status, [("Retry-After", value)], b"slow down")


CASES = [
    Case("endless-chunked-body", hostile.endless, DELIVERED, _truncated_at_cap),
    Case("huge-body", hostile.huge, DELIVERED, _truncated_at_cap),
    Case("gzip-bomb", hostile.gzip_bomb, DELIVERED, _not_decompressed),
    Case(
        "slowloris-status-line",
        lambda: hostile.drip(_ok(), 0.2),
        DEAD,
        _failed_with("total deadline"),
    ),
    Case(
        "slowloris-body",
        lambda: hostile.drip(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"z" * 100, 0.05),
        DEAD,
        _failed_with("total deadline"),
    ),
    # Nothing at all arrives: the read timeout (as long as the total) or the deadline.
    Case("stall", hostile.stall, DEAD, _failed_with("deadline", "read timeout")),
    Case("garbage-status-line", lambda: hostile.raw(b"GARBAGE\r\n\r\n"), DEAD),
    Case("status-code-99999", lambda: hostile.raw(hostile.response(99999), "keep"), DEAD),
    Case("status-code-letters", lambda: hostile.raw(hostile.response("2OO"), "keep"), DEAD),
    Case(
        "status-line-100kb", lambda: hostile.raw(hostile.response(200, reason="A" * 100_000)), DEAD
    ),
    # http.client ends the head at a line that is not a header: the rest is body, read
    # until the receiver closes.
    Case(
        "header-without-colon",
        lambda: hostile.raw(b"HTTP/1.1 200 OK\r\nNoColonHere\r\nContent-Length: 2\r\n\r\nok"),
        DELIVERED,
    ),
    Case("header-100kb", lambda: hostile.raw(_ok(("X-Big", "b" * 100_000))), DEAD),
    Case(
        "thousand-headers",
        lambda: hostile.raw(hostile.response(200, [(f"X-{i}", "v") for i in range(1000)])),
        DEAD,
    ),
    Case(
        "nul-and-control-bytes-in-headers",
        lambda: hostile.raw(_ok(("X-Evil", "a\x00b"), ("X-Ctl", "\x01\x1b[31mred\x7f")), "keep"),
        DELIVERED,
        _visible_controls,
    ),
    Case("nul-in-header-name", lambda: hostile.raw(_ok(("X-\x00Name", "v"))), DELIVERED),
    Case("nul-in-status-reason", lambda: hostile.raw(hostile.response(503, reason="a\x00b")), DEAD),
    Case("retry-after-400-digits", _retry_after("9" * 400), RETRYING),
    Case("retry-after-5000-digits-503", _retry_after("9" * 5000, 503), RETRYING),
    Case("retry-after-year-9999", _retry_after("Fri, 31 Dec 9999 23:59:59 GMT"), RETRYING),
    Case("retry-after-negative", _retry_after("-1"), DEAD),
    Case("retry-after-exponent", _retry_after("1e309"), DEAD),
    Case("retry-after-nul", _retry_after("12\x0034"), DEAD),
    Case("retry-after-impossible-date", _retry_after("Wed, 01 Jan 2025 99:99:99 +99999"), DEAD),
    Case(
        "redirect-to-metadata",
        lambda: hostile.answer(302, [("Location", "http://169.254.169.254/latest/meta-data/")]),
        DEAD,
        _failed_with("redirect 302 not followed"),
    ),
    Case(
        "redirect-308-to-self",
        lambda: hostile.answer(308, [("Location", "/innocent")]),
        DEAD,
        _failed_with("redirect 308 not followed"),
    ),
    Case("gone-410", lambda: hostile.answer(410, [], b"gone"), PARKED),
    Case("tcp-reset", hostile.reset, DEAD),
    Case("close-without-answer", lambda: hostile.raw(b""), DEAD),
    Case("interim-100-then-close", lambda: hostile.raw(b"HTTP/1.1 100 Continue\r\n\r\n"), DEAD),
    Case(
        "content-length-lie",
        lambda: hostile.raw(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nshort"),
        DEAD,
    ),
    Case(
        "broken-chunked-encoding",
        lambda: hostile.raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
        DEAD,
    ),
    Case("stale-keep-alive", hostile.stale_keep_alive, DELIVERED, _resent_on_fresh_connection),
]


@pytest.fixture
def receivers() -> Iterator[tuple[HostileReceiver, Receiver]]:
    with HostileReceiver() as bad, Receiver() as good:
        yield bad, good


def _task_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("pgqueue-task-"))


def _settled(delivery: Any, now: dt.datetime) -> bool:
    if delivery.status in ("succeeded", "dead", "cancelled"):
        return True
    # A retry scheduled well after now (a capped Retry-After), or parked with its
    # switched-off endpoint (a failed attempt, or never sent).
    later = delivery.next_attempt_at > now + dt.timedelta(seconds=60)
    return delivery.status in ("failed", "pending") and later


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_receiver_cannot_stop_the_worker(case, receivers, settings, run_worker, summary):
    from django_pgqueue import send_event
    from django_pgqueue.models import Delivery, DeliveryAttempt, Endpoint

    bad, good = receivers
    settings.PGQUEUE = {**settings.PGQUEUE, "POLL_INTERVAL": 0.05, "WEBHOOKS": WEBHOOKS}
    bad.routes["/hostile"] = case.behaviour()
    hostile_endpoint = Endpoint(url=bad.url("/hostile"))
    hostile_endpoint.full_clean()
    hostile_endpoint.save()
    innocents = []
    for i in range(INNOCENT_ENDPOINTS):
        endpoint = Endpoint(url=good.url(f"/innocent-{i}"))
        endpoint.full_clean()
        endpoint.save()
        innocents.append(endpoint)
    events = [send_event("order.paid", {"n": n}) for n in range(EVENTS)]
    deliveries = list(Delivery.objects.filter(event__in=events).values_list("pk", flat=True))
    assert len(deliveries) == EVENTS * (INNOCENT_ENDPOINTS + 1)

    threads_before = _task_threads()
    started = time.monotonic()
    worker = run_worker(burst=False, concurrency=CONCURRENCY)

    def all_settled() -> bool:
        now = timezone.now()
        rows = list(Delivery.objects.filter(pk__in=deliveries))
        return len(rows) == len(deliveries) and all(_settled(d, now) for d in rows)

    try:
        wait_for(all_settled, 90, f"every delivery of {case.name} to settle")
    except AssertionError as exc:
        states = Delivery.objects.filter(pk__in=deliveries).values_list(
            "pk", "status", "attempts", "next_attempt_at", "last_error"
        )
        raise AssertionError(f"{exc}: {[s for s in states if s[1] != 'succeeded']}") from None
    # Every task thread is still there, and still works: one more event goes through.
    threads = _task_threads() - threads_before
    assert threads == CONCURRENCY, f"{threads} of {CONCURRENCY} task threads left"
    probe = send_event("order.shipped", {"probe": True})
    wait_for(
        lambda: (
            Delivery.objects.filter(event=probe, endpoint__in=innocents, status="succeeded").count()
            == INNOCENT_ENDPOINTS
        ),
        30,
        "the probe event to reach the innocent endpoints",
    )
    worker.stop()

    # Innocent deliveries: every one succeeded at its first attempt, received exactly once.
    rows = {d.pk: d for d in Delivery.objects.filter(pk__in=deliveries).select_related("event")}
    lost = [pk for pk in deliveries if pk not in rows]
    innocent = [d for d in rows.values() if d.endpoint_id != hostile_endpoint.pk]
    assert all(d.status == "succeeded" and d.attempts == 1 for d in innocent), [
        (d.pk, d.status, d.attempts, d.last_error)
        for d in innocent
        if (d.status, d.attempts) != ("succeeded", 1)
    ]
    received: dict[tuple[str, str], int] = {}
    for request in good.requests:
        headers = {k.lower(): v for k, v in request.headers.items()}
        key = (request.path, headers["webhook-id"])
        received[key] = received.get(key, 0) + 1
    expected = {(f"/innocent-{i}", e.msg_id) for i in range(INNOCENT_ENDPOINTS) for e in events}
    assert expected <= set(received)
    duplicates = sum(received[key] - 1 for key in expected)
    assert duplicates == 0, {k: n for k, n in received.items() if n > 1}

    # The hostile deliveries settled as the rules say, with one log row per attempt.
    hostile_rows = [d for d in rows.values() if d.endpoint_id == hostile_endpoint.pk]
    attempts = list(
        DeliveryAttempt.objects.filter(delivery__in=hostile_rows).order_by("delivery_id", "id")
    )
    for delivery in hostile_rows:
        logged = [a for a in attempts if a.delivery_id == delivery.pk]
        assert len(logged) == delivery.attempts, (delivery.pk, delivery.attempts, len(logged))
        if case.settles == DELIVERED:
            assert (delivery.status, delivery.attempts) == ("succeeded", 1), delivery.last_error
        elif case.settles == DEAD:
            assert (delivery.status, delivery.attempts) == ("dead", 3), delivery.last_error
        elif case.settles == RETRYING:
            assert (delivery.status, delivery.attempts) == ("failed", 1)
            delay = (delivery.next_attempt_at - logged[-1].started_at).total_seconds()
            assert RETRY_AFTER_CAP - 5 <= delay <= RETRY_AFTER_CAP + 5, delay
        else:
            assert (
                delivery.status in ("failed", "pending") and delivery.next_attempt_at.year == 9999
            )
    if case.settles == PARKED:
        hostile_endpoint.refresh_from_db()
        assert not hostile_endpoint.is_active
    if case.check is not None:
        case.check(attempts)
    assert not lost
    summary(
        faults=len(hostile_rows),
        tasks=len(deliveries),
        duplicates=duplicates,
        lost=len(lost),
        recover=time.monotonic() - started,
        note=f"{case.name}; {threads}/{CONCURRENCY} task threads; "
        f"hostile: {sorted({d.status for d in hostile_rows})}",
    )
