"""Delivery operations, endpoint switches, secret masking and reveal."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse
from django.utils import timezone

from django_pgqueue.models import Status
from django_pgqueue.models.webhooks import BreakerState, Delivery, Endpoint

from .conftest import csrf_client, csrf_token

DELIVERIES = "admin:django_pgqueue_delivery_changelist"
ENDPOINTS = "admin:django_pgqueue_endpoint_changelist"


@pytest.mark.parametrize(
    ("operation", "before", "after"),
    [
        ("replay", Status.DEAD, Status.PENDING),
        ("retry_now", Status.FAILED, Status.FAILED),
        ("cancel", Status.PENDING, Status.CANCELLED),
        ("move_to_dlq", Status.FAILED, Status.DEAD),
    ],
)
def test_delivery_bulk_and_row_actions(operation, before, after, webhook_operator, make_delivery):
    client = csrf_client(webhook_operator)
    token = csrf_token(client, reverse(DELIVERIES))
    bulk, row, held = (
        make_delivery(before),
        make_delivery(before),
        make_delivery(Status.IN_PROGRESS),
    )

    confirm = client.post(
        reverse(DELIVERIES),
        {
            "action": operation,
            "index": "0",
            "_selected_action": [bulk.pk, held.pk],
            "csrfmiddlewaretoken": token,
        },
    )
    assert confirm.status_code == 200
    Delivery.objects.get(pk=bulk.pk, status=before)
    data = {"action": operation, "post": "yes", "_selected_action": [bulk.pk, held.pk]}
    assert client.post(reverse(DELIVERIES), data).status_code == 403  # no CSRF token
    client.post(reverse(DELIVERIES), {**data, "csrfmiddlewaretoken": token})
    Delivery.objects.get(pk=bulk.pk, status=after)
    Delivery.objects.get(pk=held.pk, status=Status.IN_PROGRESS)  # a worker holds it

    url = reverse(f"admin:pgqueue_delivery_{operation}", args=(row.pk,))
    assert client.get(url).status_code == 200
    Delivery.objects.get(pk=row.pk, status=before)
    client.post(url, {"csrfmiddlewaretoken": token})
    Delivery.objects.get(pk=row.pk, status=after)
    assert LogEntry.objects.filter(object_id__in=[str(bulk.pk), str(row.pk)]).count() == 2


def test_delivery_actions_need_replay_delivery(webhook_viewer, make_delivery):
    client = csrf_client(webhook_viewer)
    delivery = make_delivery(Status.DEAD)
    token = csrf_token(client, reverse(DELIVERIES))
    page = client.get(reverse(DELIVERIES)).content.decode()
    assert 'value="replay"' not in page
    url = reverse("admin:pgqueue_delivery_replay", args=(delivery.pk,))
    assert url not in page
    assert client.get(url).status_code == 403
    assert client.post(url, {"csrfmiddlewaretoken": token}).status_code == 403
    response = client.post(
        reverse(DELIVERIES),
        {
            "action": "replay",
            "post": "yes",
            "_selected_action": [delivery.pk],
            "csrfmiddlewaretoken": token,
        },
    )
    assert response.status_code == 403
    Delivery.objects.get(pk=delivery.pk, status=Status.DEAD)


def test_delivery_detail_links_and_attempts_newest_first(webhook_operator, make_delivery):
    from django_pgqueue.models.webhooks import DeliveryAttempt

    delivery = make_delivery(Status.DEAD)
    now = timezone.now()
    for n in (1, 2):
        DeliveryAttempt.objects.create(
            delivery=delivery,
            attempt=n,
            started_at=now,
            status_code=500 + n,
            response_body=f"body of attempt {n}",
        )
    client = csrf_client(webhook_operator)
    page = client.get(reverse("admin:django_pgqueue_delivery_change", args=(delivery.pk,)))
    html = page.content.decode()
    assert page.status_code == 200
    assert html.index("body of attempt 2") < html.index("body of attempt 1")
    assert reverse("admin:django_pgqueue_event_change", args=(delivery.event_id,)) in html
    assert reverse("admin:django_pgqueue_endpoint_change", args=(delivery.endpoint_id,)) in html
    assert "&quot;order&quot;" in html  # pretty-printed payload
    event_page = client.get(reverse("admin:django_pgqueue_event_change", args=(delivery.event_id,)))
    assert f"event__id__exact={delivery.event_id}" in event_page.content.decode()


def test_endpoint_switches(webhook_operator):
    client = csrf_client(webhook_operator)
    endpoint = Endpoint.objects.create(url="https://hooks.example.com/a")
    token = csrf_token(client, reverse(ENDPOINTS))

    url = reverse("admin:pgqueue_endpoint_disable", args=(endpoint.pk,))
    client.get(url)
    assert Endpoint.objects.get(pk=endpoint.pk).is_active
    assert client.post(url).status_code == 403
    client.post(url, {"csrfmiddlewaretoken": token})
    assert not Endpoint.objects.get(pk=endpoint.pk).is_active

    Endpoint.objects.filter(pk=endpoint.pk).update(
        breaker_state=BreakerState.OPEN, open_until=timezone.now(), consecutive_failures=7
    )
    client.post(
        reverse("admin:pgqueue_endpoint_enable", args=(endpoint.pk,)),
        {"csrfmiddlewaretoken": token},
    )
    endpoint.refresh_from_db()
    assert endpoint.is_active and endpoint.breaker_state == BreakerState.CLOSED
    assert endpoint.consecutive_failures == 0
    messages = list(LogEntry.objects.order_by("id").values_list("change_message", flat=True))
    assert messages == [
        "Disable (was enabled, circuit closed)",
        "Enable (was disabled, circuit open)",
    ]

    Endpoint.objects.filter(pk=endpoint.pk).update(
        breaker_state=BreakerState.OPEN, open_until=timezone.now(), consecutive_failures=7
    )
    client.post(
        reverse(ENDPOINTS),
        {
            "action": "reset_circuit",
            "post": "yes",
            "_selected_action": [endpoint.pk],
            "csrfmiddlewaretoken": token,
        },
    )
    assert Endpoint.objects.get(pk=endpoint.pk).breaker_state == BreakerState.CLOSED


def test_rotate_secret_keeps_the_old_one_and_test_event(webhook_operator):
    client = csrf_client(webhook_operator)
    endpoint = Endpoint.objects.create(url="https://hooks.example.com/b")
    old = endpoint.secret
    token = csrf_token(client, reverse(ENDPOINTS))
    client.post(
        reverse("admin:pgqueue_endpoint_rotate_secret", args=(endpoint.pk,)),
        {"csrfmiddlewaretoken": token},
    )
    endpoint.refresh_from_db()
    assert endpoint.secret != old
    assert old in endpoint.active_secrets()

    client.post(
        reverse("admin:pgqueue_endpoint_send_test_event", args=(endpoint.pk,)),
        {"csrfmiddlewaretoken": token},
    )
    delivery = Delivery.objects.select_related("event").get(endpoint=endpoint)
    assert delivery.event.event_type == "pgqueue.test" and delivery.status == Status.PENDING


def test_replay_endpoint_failures_since(webhook_operator, make_delivery):
    client = csrf_client(webhook_operator)
    endpoint = Endpoint.objects.create(url="https://hooks.example.com/c")
    recent = make_delivery(Status.DEAD, endpoint=endpoint)
    failed = make_delivery(Status.FAILED, endpoint=endpoint)
    old = make_delivery(
        Status.DEAD, endpoint=endpoint, created_at=timezone.now() - timedelta(days=3)
    )
    other = make_delivery(Status.DEAD)
    url = reverse("admin:pgqueue_endpoint_replay_failed", args=(endpoint.pk,))
    page = client.get(url)
    assert b'name="since"' in page.content
    token = client.cookies["csrftoken"].value
    since = (timezone.now() - timedelta(days=1)).strftime("%Y-%m-%d %H:%M:%S")
    client.post(url, {"csrfmiddlewaretoken": token, "since": since})
    assert Delivery.objects.get(pk=recent.pk).status == Status.PENDING
    assert Delivery.objects.get(pk=failed.pk).status == Status.PENDING
    assert Delivery.objects.get(pk=old.pk).status == Status.DEAD
    assert Delivery.objects.get(pk=other.pk).status == Status.DEAD
    assert LogEntry.objects.filter(content_type__model="delivery").count() == 2


def test_secret_masked_and_revealed_only_by_post_with_permission(webhook_operator, webhook_viewer):
    endpoint = Endpoint.objects.create(url="https://hooks.example.com/d")
    secret = endpoint.secret
    for user in (webhook_operator, webhook_viewer):
        client = csrf_client(user)
        assert secret not in client.get(reverse(ENDPOINTS)).content.decode()
        change = client.get(reverse("admin:django_pgqueue_endpoint_change", args=(endpoint.pk,)))
        assert secret not in change.content.decode()
        assert "whsec_••••" in change.content.decode()

    reveal = reverse("admin:pgqueue_endpoint_reveal_secret", args=(endpoint.pk,))
    viewer = csrf_client(webhook_viewer)
    token = csrf_token(viewer, reverse(ENDPOINTS))
    assert viewer.get(reveal).status_code == 403
    assert viewer.post(reveal, {"csrfmiddlewaretoken": token}).status_code == 403
    for name in ("enable", "disable", "reset_circuit", "rotate_secret", "send_test_event"):
        assert f'value="{name}"' not in viewer.get(reverse(ENDPOINTS)).content.decode()

    operator = csrf_client(webhook_operator)
    confirm = operator.get(reveal)
    assert confirm.status_code == 200 and secret not in confirm.content.decode()
    shown = operator.post(reveal, {"csrfmiddlewaretoken": operator.cookies["csrftoken"].value})
    assert secret in shown.content.decode()
    assert "no-store" in shown["Cache-Control"]
    assert LogEntry.objects.filter(change_message="Revealed the signing secret").count() == 1


def test_endpoint_flow_control_shown_and_changed_without_touching_claim_state(
    webhook_operator, make_delivery
):
    client = csrf_client(webhook_operator)
    endpoint = Endpoint.objects.create(url="http://127.0.0.1:9/flow", max_in_flight=2)
    make_delivery(Status.IN_PROGRESS, endpoint=endpoint)
    make_delivery(Status.PENDING, endpoint=endpoint)
    listing = client.get(reverse(ENDPOINTS)).content.decode()
    assert "1 / 2" in listing  # in flight / limit
    change = reverse("admin:django_pgqueue_endpoint_change", args=(endpoint.pk,))
    page = client.get(change).content.decode()
    assert "1 / 2" in page and 'name="rate_limit"' in page and 'name="max_in_flight"' in page
    # A worker claims while the operator has the form open: the claim's state must
    # survive the form's save.
    stamp = timezone.now()
    Endpoint.objects.filter(pk=endpoint.pk).update(served_at=stamp, rate_tat=stamp)
    token = csrf_token(client, change)
    response = client.post(
        change,
        {
            "csrfmiddlewaretoken": token,
            "url": endpoint.url,
            "description": "",
            "event_types": "[]",
            "headers": "{}",
            "is_active": "on",
            "max_in_flight": "5",
            "rate_limit": "10",
            "rate_period": "60",
            "ordering": "key",
        },
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    endpoint.refresh_from_db()
    assert (endpoint.max_in_flight, endpoint.rate_limit, endpoint.rate_period) == (5, 10, 60)
    assert endpoint.ordering == "key"
    assert endpoint.served_at == stamp and endpoint.rate_tat == stamp
    assert "10 per minute" in client.get(change).content.decode()
    # Zero is not a limit (it would stop the endpoint): the form refuses it.
    response = client.post(
        change,
        {
            "csrfmiddlewaretoken": token,
            "url": endpoint.url,
            "event_types": "[]",
            "headers": "{}",
            "max_in_flight": "0",
            "rate_period": "1",
            "ordering": "none",
        },
    )
    assert response.status_code == 200 and Endpoint.objects.get(pk=endpoint.pk).max_in_flight == 5
