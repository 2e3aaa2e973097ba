"""An endpoint's configuration and its run-time state have different writers.

An edit (the admin's change form, the API's PATCH, the portal's form) writes the
configuration columns only. The breaker, the 410-disable and the claim write the
run-time columns in their own statements. So an edit whose validation (DNS lookups
included) overlaps a breaker trip or a 410 never writes the old values back: the
endpoint that asked to stop stays disabled, and its deliveries stay parked.
"""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_pgqueue import send_event
from django_pgqueue.api.keys import SCOPES, create_key
from django_pgqueue.models import Application, Delivery, Endpoint
from testproject.demo import receivers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("webhooks_conf")]

#: Every column the breaker, the 410-disable and the claim own.
RUNTIME = (
    "is_active",
    "disabled_at",
    "disabled_reason",
    "breaker_state",
    "consecutive_failures",
    "open_until",
    "breaker_cooldown",
    "failing_since",
    "last_success_at",
    "served_at",
    "rate_tat",
)


def runtime(pk: int) -> dict[str, Any]:
    return Endpoint.objects.filter(pk=pk).values(*RUNTIME).get()


@pytest.fixture
def gone_during_edit(receiver, webhooks_conf, run_worker, monkeypatch):
    """An endpoint of ``cust_a`` whose receiver answers 410, one delivery due to it and
    one waiting for a later retry; the first validation of the endpoint (the edit's,
    after it loaded the row and before it saves) lets a real worker deliver the due
    one: the 410 trips the breaker and disables the endpoint, which parks the other."""
    webhooks_conf(
        BREAKER_THRESHOLD=1, PORTAL_APPLICATION="testproject.demo.portal.current_application"
    )
    receiver.routes["/gone"] = receivers.status(410)
    app = Application.objects.create(uid="cust_a")
    endpoint = Endpoint(url=receiver.url("/gone"), application=app)
    endpoint.full_clean()
    endpoint.save()
    send_event("order.paid", {"n": 1}, application="cust_a")
    later = send_event("order.paid", {"n": 2}, application="cust_a").deliveries.get()
    Delivery.objects.filter(pk=later.pk).update(
        status="failed", attempts=1, next_attempt_at=timezone.now() + timedelta(hours=1)
    )
    before = runtime(endpoint.pk)
    assert before["is_active"] and before["breaker_state"] == "closed"
    seen: dict[str, Any] = {}
    parked: list[bool] = []
    validate = Endpoint.clean

    def clean(self: Endpoint) -> None:
        validate(self)
        if self.pk == endpoint.pk and not seen:
            run_worker(burst=True)
            seen.update(runtime(endpoint.pk))
            parked.append(Delivery.objects.get(pk=later.pk).is_parked)

    monkeypatch.setattr(Endpoint, "clean", clean)
    return SimpleNamespace(endpoint=endpoint, app=app, later=later, seen=seen, parked=parked)


def assert_runtime_kept(ctx: SimpleNamespace) -> None:
    assert ctx.seen, "the edit never validated the endpoint"
    # The worker did trip the breaker and disable the endpoint during the edit.
    assert ctx.seen["is_active"] is False and ctx.seen["breaker_state"] == "open"
    assert "410" in ctx.seen["disabled_reason"] and ctx.seen["consecutive_failures"] == 1
    assert ctx.seen["open_until"] is not None and ctx.seen["failing_since"] is not None
    assert ctx.parked == [True]
    # The edit was saved, and wrote none of the run-time columns back.
    saved = Endpoint.objects.get(pk=ctx.endpoint.pk)
    assert saved.description == "edited"
    assert runtime(ctx.endpoint.pk) == ctx.seen
    # The receiver asked to stop: its waiting delivery stays parked.
    assert Delivery.objects.get(pk=ctx.later.pk).is_parked


def test_an_admin_edit_during_a_410_keeps_the_breaker_and_disable(gone_during_edit):
    ctx = gone_during_edit
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    change = reverse("admin:django_pgqueue_endpoint_change", args=(ctx.endpoint.pk,))
    response = client.post(
        change,
        {
            "url": ctx.endpoint.url,
            "application": ctx.app.pk,
            "description": "edited",
            "event_types": "[]",
            "channels": "[]",
            "headers": "{}",
            "max_in_flight": "",
            "rate_limit": "",
            "rate_period": "1",
            "ordering": "none",
        },
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert_runtime_kept(ctx)


def test_an_api_edit_during_a_410_keeps_the_breaker_and_disable(gone_during_edit):
    ctx = gone_during_edit
    key = create_key("test", SCOPES, application="cust_a").key
    response = Client().patch(
        f"/webhooks/api/endpoints/{ctx.endpoint.pk}",
        '{"description": "edited"}',
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 200, response.content
    assert_runtime_kept(ctx)


def test_a_portal_edit_during_a_410_keeps_the_breaker_and_disable(gone_during_edit):
    ctx = gone_during_edit
    client = Client()
    client.force_login(User.objects.create_user("cust_a"))
    response = client.post(
        f"/webhooks/endpoints/{ctx.endpoint.pk}/edit/",
        {"url": ctx.endpoint.url, "description": "edited", "event_types": "", "channels": ""},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert_runtime_kept(ctx)
