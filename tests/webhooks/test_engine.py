"""The delivery engine end to end: send_event -> worker -> real receivers on 127.0.0.1."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_pgqueue import send_event
from django_pgqueue.__about__ import __version__
from django_pgqueue.exceptions import PayloadTooLarge
from django_pgqueue.models import Delivery, DeliveryAttempt, Endpoint, Event
from django_pgqueue.webhooks import verify
from testproject.demo import receivers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("webhooks_conf")]


def attempts_of(delivery):
    return list(DeliveryAttempt.objects.filter(delivery=delivery).order_by("id"))


def only_delivery(event):
    return Delivery.objects.get(event=event)


def test_success_sends_signed_exact_body_with_standard_headers(receiver, make_endpoint, run_worker):
    endpoint = make_endpoint(receiver.url("/ok"))
    event = send_event("order.paid", {"order_id": 42, "note": "naïve ☃"})
    run_worker()
    delivery = only_delivery(event)
    assert delivery.status == "succeeded" and delivery.attempts == 1
    [request] = receiver.hits("/ok")
    assert event.body == '{"order_id":42,"note":"na\\u00efve \\u2603"}'
    sent_at = event.created_at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert request.body == (
        b'{"type":"order.paid","timestamp":"'
        + sent_at.encode()
        + b'","data":'
        + event.body.encode()
        + b"}"
    )
    headers = {k.lower(): v for k, v in request.headers.items()}
    assert headers["content-type"] == "application/json"
    assert headers["webhook-id"] == event.msg_id and event.msg_id.startswith("msg_")
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 30
    assert headers["idempotency-key"] == delivery.idempotency_key
    assert headers["user-agent"] == f"django-pgqueue/{__version__}"
    verify(endpoint.secret, request.body, request.headers)
    [attempt] = attempts_of(delivery)
    assert (attempt.attempt, attempt.status_code, attempt.error) == (1, 200, "")
    assert attempt.response_body == '{"ok":true}' and attempt.duration_ms >= 0


def test_a_receiver_of_a_wildcard_tells_the_event_types_apart(receiver, make_endpoint, run_worker):
    # Subscribed to order.*, the receiver must know which order event each request is,
    # and when it happened, from the signed body alone.
    endpoint = make_endpoint(receiver.url("/orders"), event_types=["order.*"])
    paid = send_event("order.paid", {"order_id": 1})
    refunded = send_event("order.refunded", {"order_id": 1})
    run_worker()
    bodies = {}
    for request in receiver.hits("/orders"):
        verify(endpoint.secret, request.body, request.headers)
        body = json.loads(request.body)
        assert set(body) == {"type", "timestamp", "data"}
        bodies[body["type"]] = body
    assert set(bodies) == {"order.paid", "order.refunded"}
    for event in (paid, refunded):
        body = bodies[event.event_type]
        assert body["data"] == {"order_id": 1}
        assert dt.datetime.fromisoformat(body["timestamp"]) == event.created_at


def test_attempt_log_keeps_awkward_text_exactly(receiver, make_endpoint, run_worker):
    # The completion sends its columns as PostgreSQL array literals: quotes,
    # backslashes, braces, commas, "NULL" and non-ASCII must come back unchanged.
    awkward = 'NULL {"a": "b,c"} \\" \\\\ ☃ \t end'
    receiver.routes["/odd"] = receivers.status(
        201, awkward.encode(), {"X-Odd": 'v"1\\,{2}', "X-Null": "NULL"}
    )
    make_endpoint(receiver.url("/odd"))
    event = send_event("order.paid", {"order_id": 7})
    run_worker()
    delivery = only_delivery(event)
    assert delivery.status == "succeeded" and delivery.last_error == ""
    [attempt] = attempts_of(delivery)
    assert (attempt.status_code, attempt.error, attempt.response_truncated) == (201, "", False)
    assert attempt.response_body == awkward
    assert attempt.response_headers["X-Odd"] == 'v"1\\,{2}'
    assert attempt.response_headers["X-Null"] == "NULL"
    assert attempt.started_at <= timezone.now() and attempt.duration_ms >= 0


def test_500_then_success_keeps_id_body_and_idempotency_key(receiver, make_endpoint, run_worker):
    receiver.routes["/flaky"] = receivers.flaky(1)
    make_endpoint(receiver.url("/flaky"))
    event = send_event("order.paid", {"order_id": 1})
    run_worker()
    delivery = only_delivery(event)
    assert delivery.status == "succeeded" and delivery.attempts == 2
    first, second = receiver.hits("/flaky")
    assert first.body == second.body
    for name in ("webhook-id", "Idempotency-Key"):
        assert first.headers[name] == second.headers[name]
    assert [(a.attempt, a.status_code) for a in attempts_of(delivery)] == [(1, 500), (2, 200)]
    assert attempts_of(delivery)[0].response_body == "temporarily broken"


def test_attempts_exhausted_goes_dead_with_last_error(receiver, make_endpoint, run_worker):
    receiver.routes["/dead"] = receivers.status(500)
    make_endpoint(receiver.url("/dead"))
    event = send_event("order.paid", {"order_id": 1})
    run_worker()
    delivery = only_delivery(event)
    # RETRY_SCHEDULE has 3 entries: 1 attempt + 3 retries.
    assert delivery.status == "dead" and delivery.attempts == 4
    assert delivery.last_error == "attempt 4: HTTP 500"
    assert len(attempts_of(delivery)) == 4 and len(receiver.hits("/dead")) == 4


def test_connection_refused_is_a_recorded_failure(make_endpoint, run_worker, webhooks_conf):
    webhooks_conf(RETRY_SCHEDULE=[600])
    make_endpoint(f"http://127.0.0.1:{receivers.free_port()}/")
    event = send_event("order.paid", {"order_id": 1})
    run_worker()
    delivery = only_delivery(event)
    assert delivery.status == "failed"
    assert delivery.next_attempt_at > timezone.now() + dt.timedelta(seconds=500)
    [attempt] = attempts_of(delivery)
    assert attempt.status_code is None and attempt.error == "connection refused"


def test_timeout_holds_and_is_recorded(receiver, make_endpoint, run_worker, webhooks_conf):
    webhooks_conf(RETRY_SCHEDULE=[600], TOTAL_TIMEOUT=0.5)
    release = threading.Event()

    def hang(handler, request):
        release.wait(10)
        handler.answer(200)

    receiver.routes["/hang"] = hang
    make_endpoint(receiver.url("/hang"))
    event = send_event("order.paid", {"order_id": 1})
    started = time.monotonic()
    run_worker()
    release.set()
    assert time.monotonic() - started < 5
    [attempt] = attempts_of(only_delivery(event))
    assert "0.5 s" in attempt.error and attempt.status_code is None


def test_slow_dribble_is_cut_at_the_total_deadline(
    receiver, make_endpoint, run_worker, webhooks_conf
):
    webhooks_conf(RETRY_SCHEDULE=[600], TOTAL_TIMEOUT=1.0)
    stop = threading.Event()

    def dribble(handler, request):
        handler.send_response(200)
        handler.send_header("Content-Length", "1000")
        handler.end_headers()
        for _ in range(1000):  # 1 byte / 100 ms: every read is well within any read timeout
            if stop.wait(0.1):
                return
            handler.wfile.write(b"x")
            handler.wfile.flush()

    receiver.routes["/drip"] = dribble
    make_endpoint(receiver.url("/drip"))
    event = send_event("order.paid", {"order_id": 1})
    started = time.monotonic()
    run_worker()
    stop.set()
    assert time.monotonic() - started < 5
    delivery = only_delivery(event)
    assert delivery.status == "failed"
    [attempt] = attempts_of(delivery)
    assert attempt.error == "total deadline of 1 s exceeded"


def test_redirect_is_not_followed(receiver, make_endpoint, run_worker, webhooks_conf):
    webhooks_conf(RETRY_SCHEDULE=[600])
    receiver.routes["/moved"] = receivers.status(302, headers={"Location": receiver.url("/new")})
    make_endpoint(receiver.url("/moved"))
    event = send_event("order.paid", {"order_id": 1})
    run_worker()
    assert receiver.hits("/new") == []
    [attempt] = attempts_of(only_delivery(event))
    assert attempt.status_code == 302 and "redirect" in attempt.error
    assert attempt.response_headers["Location"] == receiver.url("/new")


def test_huge_response_is_truncated(receiver, make_endpoint, run_worker, webhooks_conf):
    webhooks_conf(RESPONSE_CAP=1000)

    def huge(handler, request):
        handler.send_response(200)
        handler.send_header("Content-Length", str(50 * 1024 * 1024))
        handler.end_headers()
        chunk = b"y" * 65536
        for _ in range(800):
            handler.wfile.write(chunk)

    receiver.routes["/huge"] = huge
    make_endpoint(receiver.url("/huge"))
    event = send_event("order.paid", {"order_id": 1})
    started = time.monotonic()
    run_worker()
    assert time.monotonic() - started < 5
    delivery = only_delivery(event)
    assert delivery.status == "succeeded"
    [attempt] = attempts_of(delivery)
    assert attempt.response_body == "y" * 1000 and attempt.response_truncated


@pytest.mark.parametrize(("asked", "expected"), [("120", 120), ("999999", 300)])
def test_429_retry_after_is_honoured_and_capped(
    asked, expected, receiver, make_endpoint, run_worker, webhooks_conf
):
    webhooks_conf(RETRY_SCHEDULE=[1], RETRY_AFTER_CAP=300)
    receiver.routes["/busy"] = receivers.status(429, headers={"Retry-After": asked})
    make_endpoint(receiver.url("/busy"))
    event = send_event("order.paid", {"order_id": 1})
    before = timezone.now()
    run_worker()
    delivery = only_delivery(event)
    assert delivery.status == "failed"
    delay = (delivery.next_attempt_at - before).total_seconds()
    assert expected - 5 < delay < expected + 10
    assert attempts_of(delivery)[0].status_code == 429


def test_410_gone_disables_the_endpoint_and_keeps_the_delivery(receiver, make_endpoint, run_worker):
    receiver.routes["/gone"] = receivers.status(410)
    endpoint = make_endpoint(receiver.url("/gone"))
    event = send_event("order.paid", {"order_id": 1})
    run_worker()
    endpoint.refresh_from_db()
    assert not endpoint.is_active and endpoint.disabled_at is not None
    assert "410 Gone" in endpoint.disabled_reason
    delivery = only_delivery(event)
    assert delivery.status == "failed" and delivery.attempts == 1  # kept, not retried
    assert len(receiver.hits("/gone")) == 1
    assert not send_event("order.shipped", {}).deliveries.exists()


def test_event_type_filtering(receiver, make_endpoint, run_worker):
    paid = make_endpoint(receiver.url("/paid"), event_types=["order.paid"])
    users = make_endpoint(receiver.url("/users"), event_types=["user.created"])
    everything = make_endpoint(receiver.url("/all"))
    make_endpoint(receiver.url("/off"), is_active=False)
    event = send_event("order.paid", {"order_id": 1})
    assert set(event.deliveries.values_list("endpoint", flat=True)) == {paid.pk, everything.pk}
    run_worker()
    assert len(receiver.hits("/paid")) == len(receiver.hits("/all")) == 1
    assert receiver.hits("/users") == receiver.hits("/off") == []
    assert users.deliveries.count() == 0


def test_send_event_is_idempotent(receiver, make_endpoint):
    make_endpoint(receiver.url("/ok"))
    first = send_event("order.paid", {"order_id": 42}, idempotency_key="order-42-paid")
    again = send_event("order.paid", {"order_id": 43}, idempotency_key="order-42-paid")
    assert again.pk == first.pk and again.payload == {"order_id": 42}
    assert Event.objects.count() == 1 and Delivery.objects.count() == 1


def test_send_event_is_idempotent_across_concurrent_transactions(receiver, make_endpoint):
    make_endpoint(receiver.url("/ok"))
    inside = threading.Event()
    results = {}

    def second_sender():
        inside.wait(10)
        try:
            results["second"] = send_event("x.y", {"n": 2}, idempotency_key="same")
        finally:
            connection.close()

    thread = threading.Thread(target=second_sender)
    thread.start()
    with transaction.atomic():
        results["first"] = send_event("x.y", {"n": 1}, idempotency_key="same")
        inside.set()
        time.sleep(0.3)  # give the second sender time to block on our key (not a barrier)
    thread.join(10)
    assert results["second"].pk == results["first"].pk
    assert Event.objects.count() == 1 and Delivery.objects.count() == 1


def test_rollback_leaves_no_event_or_delivery(receiver, make_endpoint, run_worker):
    make_endpoint(receiver.url("/ok"))
    with pytest.raises(RuntimeError), transaction.atomic():
        send_event("order.paid", {"order_id": 1})
        raise RuntimeError("the order was not saved")
    assert Event.objects.count() == 0 and Delivery.objects.count() == 0
    run_worker()
    assert receiver.requests == []


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        ([1, 2], TypeError),
        ({"ids": {1, 2}}, TypeError),
        ({"raw": b"bytes"}, TypeError),
        ({"x": float("nan")}, ValueError),
        ({"big": "x" * 2000}, PayloadTooLarge),
    ],
)
def test_bad_payloads_write_nothing(payload, error, receiver, make_endpoint, webhooks_conf):
    webhooks_conf(MAX_PAYLOAD_BYTES=1000)
    make_endpoint(receiver.url("/ok"))
    with pytest.raises(error) as info:
        send_event("order.paid", payload)
    assert "payload" in str(info.value)
    assert Event.objects.count() == 0 and Delivery.objects.count() == 0


def test_endpoint_clean_explains_refused_urls_and_headers(webhooks_conf):
    from django.core.exceptions import ValidationError

    webhooks_conf(ALLOW_NETWORKS=[], ALLOW_HTTP=False)
    endpoint = Endpoint(url="https://169.254.169.254/latest", headers={"Host": "evil"})
    with pytest.raises(ValidationError) as info:
        endpoint.full_clean()
    errors = info.value.message_dict
    assert errors["url"][0] == (
        "This URL cannot receive webhooks: The address 169.254.169.254 is a private or "
        "reserved address, which cannot receive webhooks."
    )
    assert "Host" in errors["headers"][0]
    with pytest.raises(ValidationError) as info:
        Endpoint(url="http://example.com/hook").full_clean()
    assert "url" in info.value.message_dict
