"""Signatures of real deliveries (both official verifiers), key rotation, and secrets
at rest and in output."""

from __future__ import annotations

import io
import logging

import pytest
import standardwebhooks
import svix.webhooks
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.db import connection

from django_pgqueue import send_event
from django_pgqueue.models import Delivery, DeliveryAttempt, Endpoint
from django_pgqueue.operations import rotate_secret
from django_pgqueue.webhooks import WebhookVerificationError, verify
from django_pgqueue.webhooks.crypto import SecretDecryptionError

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("webhooks_conf")]


def stored_secret(endpoint):
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM pgqueue_endpoint WHERE id = %s", [endpoint.pk])
        return cursor.fetchone()[0]


def assert_verifies(secret, request):
    verify(secret, request.body, request.headers)
    standardwebhooks.Webhook(secret).verify(request.body, request.headers)
    svix.webhooks.Webhook(secret).verify(request.body, request.headers)


@pytest.mark.parametrize(
    "payload",
    [
        {"order_id": 42},
        {"text": "naïve ☃ \U0001f600", "nested": {"a": [1, 2.5, None, True]}},
        {"blob": "z" * 65536},
    ],
)
def test_real_deliveries_verify_with_both_official_packages(
    payload, receiver, make_endpoint, run_worker
):
    endpoint = make_endpoint(receiver.url("/ok"))
    send_event("order.paid", payload)
    run_worker()
    [request] = receiver.hits("/ok")
    assert_verifies(endpoint.secret, request)
    # One changed byte fails everywhere.
    tampered = request.body[:-1] + b" "
    with pytest.raises(WebhookVerificationError):
        verify(endpoint.secret, tampered, request.headers)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(endpoint.secret).verify(tampered, request.headers)


def test_secret_rotation_signs_with_both_and_each_verifies(receiver, make_endpoint, run_worker):
    endpoint = make_endpoint(receiver.url("/ok"))
    old = endpoint.secret
    new = rotate_secret(endpoint)
    assert new != old and new.startswith("whsec_")
    send_event("order.paid", {"order_id": 1})
    run_worker()
    [request] = receiver.hits("/ok")
    assert len(request.headers["webhook-signature"].split()) == 2
    assert_verifies(old, request)
    assert_verifies(new, request)


def test_expired_previous_secret_no_longer_signs(receiver, make_endpoint, run_worker):
    endpoint = make_endpoint(receiver.url("/ok"))
    old = endpoint.secret
    new = rotate_secret(endpoint, grace=0.000001)
    send_event("order.paid", {"order_id": 1})
    run_worker()
    [request] = receiver.hits("/ok")
    assert len(request.headers["webhook-signature"].split()) == 1
    assert_verifies(new, request)
    with pytest.raises(WebhookVerificationError):
        verify(old, request.body, request.headers)


def test_secret_is_encrypted_at_rest(make_endpoint, receiver):
    endpoint = make_endpoint(receiver.url("/ok"))
    assert endpoint.secret.startswith("whsec_")
    column = stored_secret(endpoint)
    assert not column.startswith("whsec_") and endpoint.secret not in column
    assert Endpoint.objects.get(pk=endpoint.pk).secret == endpoint.secret
    given = Endpoint.objects.create(url=receiver.url("/x"), secret=endpoint.secret)
    assert not stored_secret(given).startswith("whsec_")
    assert Endpoint.objects.get(pk=given.pk).secret == endpoint.secret


def test_key_rotation_reencrypts_and_wrong_key_errors(
    make_endpoint, receiver, run_worker, webhooks_conf
):
    first, second = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    webhooks_conf(ENCRYPTION_KEYS=[first])
    endpoint = make_endpoint(receiver.url("/ok"))
    rotate_secret(endpoint)
    secret = endpoint.secret
    before = stored_secret(endpoint)

    webhooks_conf(ENCRYPTION_KEYS=[second, first])
    assert Endpoint.objects.get(pk=endpoint.pk).secret == secret  # old key still decrypts
    out = io.StringIO()
    call_command("pgqueue_rotate_secrets_key", stdout=out)
    assert "1 endpoint(s)" in out.getvalue()
    after = stored_secret(endpoint)
    assert after != before and not after.startswith("whsec_")
    assert Fernet(second.encode()).decrypt(after.encode()).decode() == secret

    webhooks_conf(ENCRYPTION_KEYS=[second])  # the old key is gone: still readable
    assert Endpoint.objects.get(pk=endpoint.pk).active_secrets()[0] == secret

    webhooks_conf(ENCRYPTION_KEYS=[Fernet.generate_key().decode()])  # a wrong key
    with pytest.raises(SecretDecryptionError) as info:
        Endpoint.objects.get(pk=endpoint.pk).secret  # noqa: B018
    assert "ENCRYPTION_KEYS" in str(info.value) and secret not in str(info.value)
    # The worker never sends unsigned: the attempt fails, nothing reaches the receiver.
    event = send_event("order.paid", {"order_id": 1})
    run_worker(max_tasks=1)
    assert receiver.requests == []
    delivery = Delivery.objects.get(event=event)
    assert delivery.status == "failed"
    [attempt] = DeliveryAttempt.objects.filter(delivery=delivery)
    assert attempt.error.startswith("not sent: Cannot decrypt")
    endpoint = Endpoint.objects.get(pk=endpoint.pk)
    assert endpoint.consecutive_failures == 0  # our fault, not the receiver's


def test_secrets_never_in_repr_str_logs_or_attempts(
    make_endpoint, receiver, run_worker, caplog, webhooks_conf
):
    caplog.set_level(logging.DEBUG)
    receiver.routes["/fail"] = lambda handler, request: handler.answer(
        500, request.headers["webhook-signature"].encode()
    )
    endpoint = make_endpoint(receiver.url("/fail"), headers={"X-Api-Key": "abc"})
    old = endpoint.secret
    rotate_secret(endpoint)
    secrets = [old, endpoint.secret]
    send_event("order.paid", {"order_id": 1})
    run_worker()
    texts = [repr(endpoint), str(endpoint), caplog.text]
    texts += [repr(a.__dict__) for a in DeliveryAttempt.objects.all()]
    texts += [d.last_error for d in Delivery.objects.all()]
    for text in texts:
        for secret in secrets:
            assert secret not in text
            assert secret.removeprefix("whsec_") not in text


def test_a_claimed_batch_decrypts_each_endpoint_secret_once(monkeypatch, make_endpoint):
    from django_pgqueue.webhooks import crypto
    from django_pgqueue.webhooks.signing import generate_secret

    endpoint = make_endpoint("http://127.0.0.1:9/", secret=generate_secret())
    ciphertext, plaintext = stored_secret(endpoint), endpoint.secret
    calls = []
    real = crypto.decrypt_secret
    monkeypatch.setattr(
        crypto, "decrypt_secret", lambda token, **kw: calls.append(token) or real(token, **kw)
    )
    now = endpoint.created_at
    cache: dict[str, str] = {}
    first = crypto.decrypt_active_secrets(ciphertext, [], now, what="x", cache=cache)
    second = crypto.decrypt_active_secrets(ciphertext, [], now, what="x", cache=cache)
    assert first == second == [plaintext] and calls == [ciphertext]
    crypto.decrypt_active_secrets(ciphertext, [], now, what="x")  # no cache: decrypts again
    assert calls == [ciphertext, ciphertext]
