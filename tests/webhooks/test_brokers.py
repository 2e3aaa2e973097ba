"""Broker destinations against the machine's real RabbitMQ and NATS JetStream.

Delivered means confirmed by the broker; what arrives is exactly what would have been
POSTed, signed the same way; refusals and dead brokers are failed attempts that the
breaker counts; a replay is the same message id, which JetStream de-duplicates.

Restarting a broker mid-run is tested in test_broker_restart.py, on brokers of its own:
these are the machine's, shared with other test runs.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from django_pgqueue import send_event
from django_pgqueue.models import Delivery, DeliveryAttempt, Endpoint
from django_pgqueue.operations import replay
from django_pgqueue.webhooks import verify

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("webhooks_conf")]

RABBIT = ("127.0.0.1", 5672)
NATS = ("127.0.0.1", 4222)


def reachable(address: tuple[str, int]) -> bool:
    try:
        socket.create_connection(address, timeout=1).close()
    except OSError:
        return False
    return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def attempts_of(delivery: Any) -> list[Any]:
    return list(DeliveryAttempt.objects.filter(delivery=delivery).order_by("id"))


@pytest.fixture
def rabbit() -> Iterator[dict[str, str]]:
    """A fresh direct exchange with one queue bound to routing key ``k``."""
    if not reachable(RABBIT):
        pytest.skip("RabbitMQ not reachable on 127.0.0.1:5672")
    import pika

    connection = pika.BlockingConnection(pika.ConnectionParameters(*RABBIT))
    channel = connection.channel()
    name = f"pgq-test-{uuid.uuid4().hex[:12]}"
    channel.exchange_declare(name, "direct", auto_delete=False)
    channel.queue_declare(name, exclusive=True)
    channel.queue_bind(name, name, routing_key="k")
    yield {"exchange": name, "queue": name, "channel": channel}
    channel.exchange_delete(name)
    connection.close()


@pytest.fixture
def stream() -> Iterator[dict[str, Any]]:
    """A fresh JetStream stream storing one subject; ``messages()`` reads it back."""
    if not reachable(NATS):
        pytest.skip("NATS not reachable on 127.0.0.1:4222")
    import nats

    name = f"PGQ_TEST_{uuid.uuid4().hex[:12].upper()}"
    subject = f"pgq.test.{name.lower()}"
    loop = asyncio.new_event_loop()

    async def create() -> Any:
        nc = await nats.connect("nats://127.0.0.1:4222")
        await nc.jetstream().add_stream(name=name, subjects=[subject])
        return nc

    nc = loop.run_until_complete(create())

    def messages() -> list[Any]:
        async def read() -> list[Any]:
            js = nc.jetstream()
            info = await js.stream_info(name)
            return [await js.get_msg(name, seq) for seq in range(1, info.state.last_seq + 1)]

        return loop.run_until_complete(read())

    yield {"subject": subject, "messages": messages}
    loop.run_until_complete(nc.jetstream().delete_stream(name))
    loop.run_until_complete(nc.close())
    loop.close()


def amqp_url(exchange: str, routing_key: str = "k", port: int = 5672) -> str:
    return f"amqp://guest:guest@127.0.0.1:{port}/%2F?exchange={exchange}&routing_key={routing_key}"


def test_amqp_delivery_is_confirmed_and_received_exactly_as_signed(
    rabbit, make_endpoint, run_worker
):
    endpoint = make_endpoint(amqp_url(rabbit["exchange"]))
    event = send_event("order.paid", {"order_id": 42, "note": "naïve ☃"})
    run_worker()
    delivery = Delivery.objects.get(event=event)
    assert delivery.status == "succeeded" and delivery.attempts == 1
    method, properties, body = rabbit["channel"].basic_get(rabbit["queue"], auto_ack=True)
    assert method is not None, "the confirmed message is not in the queue"
    assert body == event.request_body().encode()
    assert properties.message_id == event.msg_id
    headers = properties.headers
    assert headers["webhook-id"] == event.msg_id
    verify(endpoint.secret, body, headers)
    [attempt] = attempts_of(delivery)
    assert attempt.error == "" and attempt.status_code is None
    assert "confirmed" in attempt.response_body
    # Exactly one message: nothing was published twice.
    assert rabbit["channel"].basic_get(rabbit["queue"], auto_ack=True)[0] is None


def test_nats_delivery_is_acked_and_received_exactly_as_signed(stream, make_endpoint, run_worker):
    endpoint = make_endpoint(f"nats://127.0.0.1:4222?subject={stream['subject']}")
    event = send_event("order.paid", {"order_id": 7})
    run_worker()
    delivery = Delivery.objects.get(event=event)
    assert delivery.status == "succeeded" and delivery.attempts == 1
    [message] = stream["messages"]()
    assert message.data == event.request_body().encode()
    assert message.headers["Nats-Msg-Id"] == event.msg_id
    verify(endpoint.secret, message.data, message.headers)
    [attempt] = attempts_of(delivery)
    assert attempt.error == "" and "sequence 1" in attempt.response_body


def test_unknown_exchange_and_unroutable_key_are_failed_attempts(
    rabbit, make_endpoint, run_worker, webhooks_conf
):
    webhooks_conf(RETRY_SCHEDULE=[0])
    missing = make_endpoint(amqp_url("pgq-no-such-exchange"))
    unroutable = make_endpoint(amqp_url(rabbit["exchange"], routing_key="nobody"))
    send_event("order.paid", {"n": 1})
    run_worker()
    gone, _ = attempts_of(Delivery.objects.get(endpoint=missing))
    assert gone.error.startswith("channel closed by the broker: 404 NOT_FOUND")
    assert "pgq-no-such-exchange" in gone.error
    lost, _ = attempts_of(Delivery.objects.get(endpoint=unroutable))
    assert lost.error == (
        f"unroutable: exchange {rabbit['exchange']!r} routed the message to no queue "
        "(routing key 'nobody')"
    )
    for delivery in Delivery.objects.all():
        assert delivery.status == "dead" and "guest" not in delivery.last_error


def test_a_nack_is_a_failed_attempt(rabbit, make_endpoint, run_worker, webhooks_conf):
    webhooks_conf(RETRY_SCHEDULE=[0])
    channel = rabbit["channel"]
    full = f"{rabbit['queue']}-full"
    # A queue that holds nothing and rejects what it cannot hold: the broker nacks.
    channel.queue_declare(
        full, exclusive=True, arguments={"x-max-length": 0, "x-overflow": "reject-publish"}
    )
    channel.queue_bind(full, rabbit["exchange"], routing_key="full")
    endpoint = make_endpoint(amqp_url(rabbit["exchange"], routing_key="full"))
    send_event("order.paid", {"n": 1})
    run_worker()
    delivery = Delivery.objects.get(endpoint=endpoint)
    assert delivery.status == "dead"
    assert {a.error for a in attempts_of(delivery)} == {
        "nacked: the broker refused the message (publisher confirm negative)"
    }


def test_subject_without_a_stream_is_a_failed_attempt(stream, make_endpoint, run_worker):
    endpoint = make_endpoint("nats://127.0.0.1:4222?subject=pgq.test.nobody.stores.this")
    send_event("order.paid", {"n": 1})
    run_worker()
    delivery = Delivery.objects.get(endpoint=endpoint)
    assert delivery.status != "succeeded"
    assert attempts_of(delivery)[0].error == (
        "no JetStream stream stores subject 'pgq.test.nobody.stores.this'"
    )


@pytest.mark.parametrize("scheme", ["amqp", "nats"])
def test_a_dead_broker_opens_the_breaker_and_loses_nothing(
    scheme, make_endpoint, run_worker, webhooks_conf
):
    webhooks_conf(RETRY_SCHEDULE=[0, 0, 0, 0, 0], BREAKER_THRESHOLD=3, BREAKER_COOLDOWN=60.0)
    port = free_port()
    url = (
        amqp_url("x", port=port)
        if scheme == "amqp"
        else f"nats://u:hunter2@127.0.0.1:{port}?subject=a.b"
    )
    endpoint = make_endpoint(url)
    for i in range(5):
        send_event("order.paid", {"n": i})
    run_worker(concurrency=1, prefetch=0)
    endpoint.refresh_from_db()
    # At least the threshold: a refusal takes a millisecond, so one more claim may
    # start before the failure that opened the circuit is written.
    assert endpoint.breaker_state == "open" and endpoint.consecutive_failures >= 3
    errors = set(DeliveryAttempt.objects.values_list("error", flat=True))
    assert errors == {"connection refused"}
    # Nothing lost: every delivery is still there, none dead, waiting for the circuit.
    assert Delivery.objects.filter(endpoint=endpoint).count() == 5
    assert not Delivery.objects.filter(status__in=["dead", "succeeded"]).exists()


def test_replay_republishes_the_same_message_id_and_jetstream_keeps_one(
    stream, make_endpoint, run_worker
):
    make_endpoint(f"nats://127.0.0.1:4222?subject={stream['subject']}")
    event = send_event("order.paid", {"n": 1})
    run_worker()
    delivery = Delivery.objects.get(event=event)
    assert delivery.status == "succeeded"
    assert replay(Delivery, [delivery.pk]).changed
    run_worker()
    delivery.refresh_from_db()
    assert delivery.status == "succeeded"
    first, second = attempts_of(delivery)
    assert "duplicate" not in first.response_body
    assert second.response_body.endswith("(duplicate: already stored)")
    [message] = stream["messages"]()
    assert message.headers["Nats-Msg-Id"] == event.msg_id


@pytest.mark.parametrize(
    ("url", "error"),
    [
        (
            "amqp://guest:s3cret@127.0.0.1:5672/%2F?routing_key=k",
            "The amqp:// URL has no exchange: add ?exchange=NAME (and &routing_key=KEY).",
        ),
        ("nats://127.0.0.1:4222", "The nats:// URL has no subject: add ?subject=NAME."),
        (
            "nats://127.0.0.1:4222?subject=orders.*",
            "The NATS subject 'orders.*' is not one subject: dot-separated tokens, "
            "no spaces and no wildcards (* or >).",
        ),
        (
            "amqp://guest:s3cret@127.0.0.1:5672/?exchange=e&queue=q",
            "The amqp:// URL parameter 'queue' is not known; it takes exchange and routing_key.",
        ),
    ],
)
def test_broker_urls_are_checked_with_clear_errors(url, error):
    from django.core.exceptions import ValidationError

    endpoint = Endpoint(url=url)
    with pytest.raises(ValidationError) as caught:
        endpoint.full_clean()
    assert caught.value.message_dict["url"] == [f"This URL cannot receive webhooks: {error}"]


def test_a_broker_on_loopback_is_refused_unless_allowed_and_its_password_never_shown(
    webhooks_conf, make_endpoint
):
    from django.core.exceptions import ValidationError

    url = "amqp://guest:s3cret@127.0.0.1:5672/%2F?exchange=e"
    webhooks_conf(ALLOW_NETWORKS=[])
    with pytest.raises(ValidationError) as caught:
        Endpoint(url=url).full_clean()
    [message] = caught.value.message_dict["url"]
    # The customer's text names the host and the kind of refusal, never the password.
    assert "127.0.0.1" in message and "private or reserved" in message
    assert "s3cret" not in message
    webhooks_conf()
    endpoint = make_endpoint(url)
    assert str(endpoint) == "amqp://guest:***@127.0.0.1:5672/%2F?exchange=e"
    assert "s3cret" not in repr(endpoint)


def password_of(url: str) -> str:
    from django_pgqueue.webhooks.brokers import urls

    return urls.open_password(urls.parse(url).password, what="a test password")


def test_a_broker_password_is_stored_encrypted_and_rotated_with_the_keys(
    make_endpoint, webhooks_conf
):
    from cryptography.fernet import Fernet

    from django_pgqueue.webhooks.store import reencrypt_secrets

    old_key, new_key = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    webhooks_conf(ENCRYPTION_KEYS=[old_key])
    endpoint = make_endpoint("amqp://guest:s3cret@127.0.0.1:5672/%2F?exchange=e")
    stored = Endpoint.objects.values_list("url", flat=True).get(pk=endpoint.pk)
    assert "s3cret" not in stored and stored.startswith("amqp://guest:~sealed~")
    assert password_of(stored) == "s3cret"
    webhooks_conf(ENCRYPTION_KEYS=[new_key, old_key])
    reencrypt_secrets()
    webhooks_conf(ENCRYPTION_KEYS=[new_key])
    resealed = Endpoint.objects.values_list("url", flat=True).get(pk=endpoint.pk)
    assert resealed != stored and password_of(resealed) == "s3cret"


def test_a_masked_password_sent_back_keeps_the_stored_one_for_the_same_host_only(make_endpoint):
    from django.core.exceptions import ValidationError

    endpoint = make_endpoint("amqp://guest:s3cret@127.0.0.1:5672/%2F?exchange=e")
    edited = Endpoint.objects.get(pk=endpoint.pk)
    edited.url = "amqp://guest:***@127.0.0.1:5672/%2F?exchange=e&routing_key=new"
    edited.full_clean()
    assert password_of(edited.url) == "s3cret"
    assert edited.url.endswith("@127.0.0.1:5672/%2F?exchange=e&routing_key=new")
    # Pointed at another host, the old password is not sent along.
    edited.url = "amqp://guest:***@127.0.0.2:5672/%2F?exchange=e"
    with pytest.raises(ValidationError) as caught:
        edited.full_clean()
    [message] = caught.value.message_dict["url"]
    assert "write it again" in message and "s3cret" not in message


def test_the_admin_and_the_api_show_the_url_masked(make_endpoint, admin_client):
    from django.urls import reverse

    from django_pgqueue.api.endpoints import render

    endpoint = make_endpoint("nats://pub:s3cret@127.0.0.1:4222?subject=a.b")
    for page in (
        reverse("admin:django_pgqueue_endpoint_changelist"),
        reverse("admin:django_pgqueue_endpoint_change", args=[endpoint.pk]),
    ):
        html = admin_client.get(page).content.decode()
        assert "pub:***@127.0.0.1" in html and "s3cret" not in html
    assert render(endpoint)["url"] == "nats://pub:***@127.0.0.1:4222?subject=a.b"


def test_an_admin_form_refused_for_another_field_shows_the_typed_password_masked(admin_client):
    from django.urls import reverse

    typed = "nats://pub:typed-s3cret@127.0.0.1:4222?subject=a.b"
    refused = admin_client.post(
        reverse("admin:django_pgqueue_endpoint_add"),
        {"url": typed, "headers": "not json", "event_types": "[]", "channels": "[]"},
    )
    assert refused.status_code == 200 and refused.context["adminform"].form.errors
    body = refused.content.decode()
    assert "pub:***@127.0.0.1" in body and "typed-s3cret" not in body
    assert not Endpoint.objects.exists()


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server that accepts connections and never says a word: a hung broker."""
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.parametrize("scheme", ["amqp", "nats"])
def test_a_silent_broker_is_a_failed_attempt_within_the_deadline(
    scheme, silent_server, make_endpoint, run_worker, webhooks_conf
):
    webhooks_conf(RETRY_SCHEDULE=[0], CONNECT_TIMEOUT=0.5, TOTAL_TIMEOUT=1.0)
    url = (
        amqp_url("x", port=silent_server)
        if scheme == "amqp"
        else f"nats://127.0.0.1:{silent_server}?subject=a.b"
    )
    endpoint = make_endpoint(url)
    send_event("order.paid", {"n": 1})
    run_worker(timeout=30)
    delivery = Delivery.objects.get(endpoint=endpoint)
    assert delivery.status == "dead" and delivery.attempts == 2
    for attempt in attempts_of(delivery):
        assert attempt.duration_ms < 3000
        assert attempt.error == "connect timeout (0.5 s)"


class MutingProxy:
    """A TCP proxy to a real broker that stops passing the broker's answers once the
    client sent ``marker``: the publish arrives, its confirm or ack never does."""

    def __init__(self, upstream: tuple[str, int], marker: bytes) -> None:
        import threading

        self.upstream = upstream
        self.marker = marker
        self.muted = threading.Event()
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.port = int(self.server.getsockname()[1])
        self.sockets: list[socket.socket] = [self.server]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                client = self.server.accept()[0]
            except OSError:
                return
            broker = socket.create_connection(self.upstream)
            self.sockets += [client, broker]
            threading.Thread(target=self._pipe, args=(client, broker, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(broker, client, False), daemon=True).start()

    def _pipe(self, source: socket.socket, target: socket.socket, from_client: bool) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                return
            if from_client and self.marker in data:
                self.muted.set()
            if from_client or not self.muted.is_set():
                try:
                    target.sendall(data)
                except OSError:
                    return

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


@pytest.mark.parametrize("scheme", ["amqp", "nats"])
def test_a_publish_never_confirmed_fails_at_the_total_deadline(
    scheme, rabbit, stream, make_endpoint, run_worker, webhooks_conf
):
    webhooks_conf(RETRY_SCHEDULE=[0], CONNECT_TIMEOUT=1.0, TOTAL_TIMEOUT=1.5)
    proxy = MutingProxy(RABBIT if scheme == "amqp" else NATS, b"never-confirmed")
    try:
        url = (
            amqp_url(rabbit["exchange"], port=proxy.port)
            if scheme == "amqp"
            else f"nats://127.0.0.1:{proxy.port}?subject={stream['subject']}"
        )
        endpoint = make_endpoint(url)
        send_event("order.paid", {"note": "never-confirmed"})
        run_worker(timeout=30)
    finally:
        proxy.close()
    assert proxy.muted.is_set()
    delivery = Delivery.objects.get(endpoint=endpoint)
    assert delivery.status == "dead" and delivery.attempts == 2
    first, second = attempts_of(delivery)
    assert first.error == "total deadline of 1.5 s exceeded"
    assert 1400 <= first.duration_ms < 4000
    # The proxy stays mute: a new connection cannot even finish its handshake.
    assert second.error in {"total deadline of 1.5 s exceeded", "connect timeout (1 s)"}


def test_the_admin_form_takes_a_broker_url(rf, admin_user):
    from django.contrib import admin

    model_admin = admin.site._registry[Endpoint]
    request = rf.get("/")
    request.user = admin_user
    form_class = model_admin.get_form(request, None)
    url = "nats://127.0.0.1:4222?subject=orders.paid"
    form = form_class(data={"url": url, "event_types": "[]", "channels": "[]", "headers": "{}"})
    form.is_valid()
    assert "url" not in form.errors, form.errors
    assert form.cleaned_data["url"] == url
