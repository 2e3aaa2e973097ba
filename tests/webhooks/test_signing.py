"""Standard Webhooks signing: known answers, the reference libraries as oracles, and headers."""

import base64
import hashlib
import hmac
import json
import time
from pathlib import Path

import pytest
import standardwebhooks
import svix.webhooks
from hypothesis import given, settings
from hypothesis import strategies as st

from django_pgqueue.__about__ import __version__
from django_pgqueue.webhooks import WebhookVerificationError, sign, verify
from django_pgqueue.webhooks.signing import (
    build_headers,
    generate_secret,
    new_message_id,
    parse_secret,
    signature_header,
    validate_custom_headers,
)

VECTORS = json.loads((Path(__file__).parent / "standard_webhooks_vectors.json").read_text())
POSITIVE = {vector["name"]: vector for vector in VECTORS["positive"]}


def _headers(msg_id, timestamp, signature):
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature,
    }


@pytest.mark.parametrize("name", sorted(POSITIVE))
def test_sign_matches_known_answer(name):
    vector = POSITIVE[name]
    signature = sign(
        vector["secret"], vector["msg_id"], vector["timestamp"], vector["payload"].encode()
    )
    assert signature == vector["signature"]


@pytest.mark.parametrize("name", sorted(POSITIVE))
def test_verify_known_answer_with_injected_now(name):
    vector = POSITIVE[name]
    headers = _headers(vector["msg_id"], vector["timestamp"], vector["signature"])
    verify(vector["secret"], vector["payload"].encode(), headers, now=vector["timestamp"] + 10)


@pytest.mark.parametrize("bad_signature", VECTORS["negative_for_A"])
def test_negative_vectors_fail(bad_signature):
    vector = POSITIVE["A"]
    headers = _headers(vector["msg_id"], vector["timestamp"], bad_signature)
    with pytest.raises(WebhookVerificationError, match="no matching"):
        verify(vector["secret"], vector["payload"].encode(), headers, now=vector["timestamp"])


def test_secret_without_prefix_is_accepted():
    vector = POSITIVE["A"]
    bare = vector["secret"].removeprefix("whsec_")
    assert (
        sign(bare, vector["msg_id"], vector["timestamp"], vector["payload"].encode())
        == (vector["signature"])
    )
    headers = _headers(vector["msg_id"], vector["timestamp"], vector["signature"])
    verify(bare, vector["payload"].encode(), headers, now=vector["timestamp"])


@pytest.mark.parametrize("oracle", [standardwebhooks.Webhook, svix.webhooks.Webhook])
def test_reference_libraries_verify_our_headers(oracle):
    secret = generate_secret()
    body = json.dumps({"type": "invoice.paid", "amount": 1250, "name": "Zoë"}, ensure_ascii=False)
    body = body.encode()
    headers = build_headers(
        secrets=[secret],
        msg_id=new_message_id(),
        timestamp=int(time.time()),
        body=body,
        idempotency_key="delivery-42",
    )
    # Both raise on failure; standardwebhooks returns the parsed body, svix returns None.
    oracle(secret).verify(body, dict(headers))


@pytest.mark.parametrize("oracle", [standardwebhooks.Webhook, svix.webhooks.Webhook])
def test_rotation_both_secrets_verify(oracle):
    old, new = generate_secret(), generate_secret(48)
    body = b'{"rotated": true}'
    msg_id, timestamp = new_message_id(), int(time.time())
    header = signature_header([old, new], msg_id, timestamp, body)
    assert len(header.split(" ")) == 2
    headers = _headers(msg_id, timestamp, header)
    for secret in (old, new):
        verify(secret, body, headers)
        oracle(secret).verify(body, dict(headers))
    with pytest.raises(WebhookVerificationError):
        verify(generate_secret(), body, headers)


def test_one_byte_change_fails():
    secret = generate_secret()
    body = b'{"amount": 100}'
    msg_id, timestamp = new_message_id(), int(time.time())
    headers = _headers(msg_id, timestamp, sign(secret, msg_id, timestamp, body))
    verify(secret, body, headers)
    with pytest.raises(WebhookVerificationError, match="no matching"):
        verify(secret, b'{"amount": 900}', headers)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(secret).verify(b'{"amount": 900}', dict(headers))


@pytest.mark.parametrize(
    ("offset", "message"), [(-301, "too old"), (301, "in the future"), (-3600, "too old")]
)
def test_stale_and_future_timestamps_fail(offset, message):
    secret = generate_secret()
    body = b"{}"
    now = 1_700_000_000
    timestamp = now + offset
    headers = _headers("msg_1", timestamp, sign(secret, "msg_1", timestamp, body))
    with pytest.raises(WebhookVerificationError, match=message):
        verify(secret, body, headers, now=now)


def test_timestamp_inside_tolerance_passes():
    secret = generate_secret()
    now = 1_700_000_000
    for timestamp in (now - 300, now + 300):
        headers = _headers("msg_1", timestamp, sign(secret, "msg_1", timestamp, b"{}"))
        verify(secret, b"{}", headers, now=now)


def test_headers_are_case_insensitive_and_unknown_versions_skipped():
    secret = generate_secret()
    msg_id, timestamp = "msg_abc", 1_700_000_000
    good = sign(secret, msg_id, timestamp, b"{}")
    headers = {
        "Webhook-Id": msg_id,
        "WEBHOOK-TIMESTAMP": str(timestamp),
        "Webhook-Signature": f"v2,ignored-by-v1-verifiers v1a,zzz {good}",
    }
    verify(secret, b"{}", headers, now=timestamp)


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_missing_header_is_named(missing):
    secret = generate_secret()
    headers = _headers("msg_1", 1_700_000_000, sign(secret, "msg_1", 1_700_000_000, b"{}"))
    del headers[missing]
    with pytest.raises(WebhookVerificationError, match=missing):
        verify(secret, b"{}", headers, now=1_700_000_000)


@pytest.mark.parametrize("timestamp", ["abc", "1.5e9", "-5", ""])
def test_garbage_timestamp_fails(timestamp):
    secret = generate_secret()
    headers = {"webhook-id": "msg_1", "webhook-timestamp": timestamp, "webhook-signature": "v1,x"}
    with pytest.raises(WebhookVerificationError):
        verify(secret, b"{}", headers)


def test_only_v2_signatures_fail():
    secret = generate_secret()
    headers = _headers("msg_1", 1_700_000_000, "v2,abc")
    with pytest.raises(WebhookVerificationError, match="no matching"):
        verify(secret, b"{}", headers, now=1_700_000_000)


def test_generate_secret_shape():
    for nbytes in (24, 32, 64):
        secret = generate_secret(nbytes)
        assert secret.startswith("whsec_")
        assert len(base64.b64decode(secret.removeprefix("whsec_"))) == nbytes
        assert parse_secret(secret) == base64.b64decode(secret.removeprefix("whsec_"))
    assert generate_secret() != generate_secret()
    for nbytes in (0, 23, 65):
        with pytest.raises(ValueError, match="between 24 and 64"):
            generate_secret(nbytes)


@pytest.mark.parametrize(
    ("secret", "problem"),
    [
        ("whsec_", "empty"),
        ("", "empty"),
        ("whsec_not base64!!", "not valid base64"),
        ("whsec_" + base64.b64encode(b"short").decode(), "decodes to 5 bytes"),
        ("whsec_" + base64.b64encode(b"x" * 65).decode(), "decodes to 65 bytes"),
    ],
)
def test_parse_secret_errors_never_echo_the_secret(secret, problem):
    with pytest.raises(ValueError, match=problem) as excinfo:
        parse_secret(secret)
    encoded = secret.removeprefix("whsec_")
    if encoded:
        assert encoded not in str(excinfo.value)


def test_message_ids_are_unique_and_dot_free():
    ids = {new_message_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(i.startswith("msg_") and "." not in i for i in ids)


@pytest.mark.parametrize("msg_id", ["", "msg.1", "msg 1"])
def test_sign_rejects_ambiguous_message_ids(msg_id):
    with pytest.raises(ValueError, match="message id"):
        sign(generate_secret(), msg_id, 1, b"{}")


def test_build_headers_full_set():
    secret = generate_secret()
    body = b'{"a": 1}'
    headers = build_headers(
        secrets=[secret],
        msg_id="msg_1",
        timestamp=1_700_000_000,
        body=body,
        idempotency_key="key-1",
        custom_headers={"Authorization": "Bearer t0ken", "X-Tenant": "acme"},
    )
    assert headers["Content-Type"] == "application/json"
    assert headers["webhook-id"] == "msg_1"
    assert headers["webhook-timestamp"] == "1700000000"
    assert headers["webhook-signature"] == sign(secret, "msg_1", 1_700_000_000, body)
    assert headers["Idempotency-Key"] == "key-1"
    assert headers["User-Agent"] == f"django-pgqueue/{__version__}"
    assert headers["Accept-Encoding"] == "identity"
    assert headers["Authorization"] == "Bearer t0ken"
    assert headers["X-Tenant"] == "acme"


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Evil": "a\r\nHost: internal"},
        {"X-Evil": "a\nb"},
        {"X-Evil": "a\x00b"},
        {"X-Evil\r\nHost": "a"},
        {"X Evil": "a"},
        {"X-Évil": "a"},
        {"": "a"},
        {"X-Bell": "a\x07b"},
        {"Host": "internal"},
        {"host": "internal"},
        {"Content-Length": "0"},
        {"Transfer-Encoding": "chunked"},
        {"Connection": "close"},
        {"Keep-Alive": "1"},
        {"Upgrade": "websocket"},
        {"TE": "trailers"},
        {"Trailer": "x"},
        {"Proxy-Authorization": "Basic x"},
        {"proxy-anything": "x"},
        {"webhook-signature": "v1,forged"},
        {"Webhook-Custom": "x"},
        {"Idempotency-Key": "x"},
        {"User-Agent": "x"},
        {"Content-Type": "text/plain"},
        {"Accept-Encoding": "gzip"},
        {"Cookie": "session=1"},
        {"X-Big": "a" * 4097},
        {"X-Unicode": "snow ☃"},
    ],
)
def test_validate_custom_headers_rejects(headers):
    with pytest.raises(ValueError):
        validate_custom_headers(headers)


def test_validate_custom_headers_accepts_ordinary_headers():
    validate_custom_headers({"Authorization": "Bearer x", "X-Api-Key": "a" * 4096, "X-T": "a\tb"})


def test_build_headers_refuses_injection():
    with pytest.raises(ValueError, match="CR, LF or NUL"):
        build_headers(
            secrets=[generate_secret()],
            msg_id="msg_1",
            timestamp=1,
            body=b"{}",
            idempotency_key="k",
            custom_headers={"X-A": "b\r\nX-Injected: 1"},
        )


@settings(max_examples=50, deadline=None)
@given(body=st.binary(max_size=2048), timestamp=st.integers(0, 2**40), nbytes=st.integers(24, 64))
def test_sign_verify_round_trip(body, timestamp, nbytes):
    secret = generate_secret(nbytes)
    msg_id = new_message_id()
    headers = _headers(msg_id, timestamp, sign(secret, msg_id, timestamp, body))
    verify(secret, body, headers, now=timestamp)
    # The reference implementation computes the same signature.
    key = parse_secret(secret)
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    assert sign(secret, msg_id, timestamp, body) == "v1," + base64.b64encode(digest).decode()
