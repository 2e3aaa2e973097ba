"""An endpoint's configuration and its run-time state have different writers.

An edit (the admin's change form, the API's PATCH, the portal's form) writes the
configuration columns only. The breaker, the 410-disable and the claim write the
run-time columns in their own statements. So an edit whose validation (DNS lookups
included) overlaps a breaker trip or a 410 never writes the old values back: the
endpoint that asked to stop stays disabled, and its deliveries stay parked.
"""

from __future__ import annotations

import json
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_pgqueue import send_event
from django_pgqueue.api.keys import CUSTOMER_SCOPES, SCOPES, create_key
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
        BREAKER_THRESHOLD=1,
        PORTAL_APPLICATION="testproject.demo.portal.current_application",
        # The receiver is http on 127.0.0.1: a destination the portal must be opened to.
        PORTAL_DESTINATIONS=["https", "http"],
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
    key = create_key("test", CUSTOMER_SCOPES, application="cust_a").key
    response = Client().patch(
        f"/webhooks/api/endpoints/{ctx.endpoint.pk}",
        '{"description": "edited"}',
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 200, response.content
    # The answer shows the endpoint as it is now: disabled, circuit open.
    shown = json.loads(response.content)
    assert shown["is_active"] is False and shown["breaker_state"] == "open"
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


# ----- the model's save: configuration only ---------------------------------------------


def test_save_writes_configuration_only_and_names_the_operation_for_the_rest():
    endpoint = Endpoint.objects.create(url="https://hooks.example.com/a")
    stale = Endpoint.objects.get(pk=endpoint.pk)
    Endpoint.objects.filter(pk=endpoint.pk).update(consecutive_failures=3, rate_tat=timezone.now())
    stale.description = "kept"
    stale.save()
    saved = Endpoint.objects.get(pk=endpoint.pk)
    assert saved.description == "kept" and saved.consecutive_failures == 3 and saved.rate_tat
    # Changing run-time state or the secret on an instance is refused, not ignored.
    saved.is_active = False
    with pytest.raises(ValueError, match=r"is_active changed.*apply_endpoint_operation"):
        saved.save()
    saved = Endpoint.objects.get(pk=endpoint.pk)
    saved.secret = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo="
    with pytest.raises(ValueError, match=r"secret changed.*rotate_secret"):
        saved.save()
    with pytest.raises(ValueError, match=r"configuration columns only .* got breaker_state"):
        saved.save(update_fields=["description", "breaker_state"])
    assert Endpoint.objects.filter(pk=endpoint.pk, is_active=True).exists()
    # What the row holds after a refresh is what the instance compares with.
    Endpoint.objects.filter(pk=endpoint.pk).update(is_active=False)
    endpoint.refresh_from_db()
    endpoint.description = "after a refresh"
    endpoint.save()
    assert not Endpoint.objects.get(pk=endpoint.pk).is_active
    assert not hasattr(Endpoint, "rotate_secret")  # one entry point: operations.rotate_secret


# ----- the test event: through the fan-out, without who sent it -------------------------


def test_the_admin_test_event_goes_through_the_fan_out_and_names_nobody(
    receiver, make_endpoint, run_worker
):
    from django_pgqueue.webhooks import verify

    endpoint = make_endpoint(receiver.url("/ok"), event_types=["order.*"], ordering="endpoint")
    staff = User.objects.create_superuser("alice.staff", password="pw")
    client = Client()
    client.force_login(staff)
    client.post(reverse("admin:pgqueue_endpoint_send_test_event", args=(endpoint.pk,)))
    delivery = Delivery.objects.select_related("event").get(endpoint=endpoint)
    # Born in the fan-out as a real delivery: a FIFO endpoint's line, tried once.
    assert delivery.event.event_type == "pgqueue.test" and delivery.max_attempts == 1
    assert delivery.ordering_key == "" and delivery.event.application_id is None
    run_worker(burst=True)
    receiver.settle()
    [request] = receiver.hits("/ok")
    assert "alice" not in request.body.decode() and "sent_by" not in request.body.decode()
    verify(endpoint.secret, request.body, request.headers)  # raises unless signed
    envelope = json.loads(request.body)
    assert envelope["type"] == "pgqueue.test" and envelope["data"] == {"endpoint_id": endpoint.pk}
    # Who sent it is on record where operators look.
    from django.contrib.admin.models import LogEntry

    assert LogEntry.objects.filter(user=staff, object_id=str(endpoint.pk)).exists()


def test_a_test_event_to_a_disabled_endpoint_is_refused_and_writes_nothing(tenants_api):
    endpoint, client = tenants_api
    from django_pgqueue.models import Event
    from django_pgqueue.operations import apply_endpoint_operation

    apply_endpoint_operation("disable", [endpoint.pk])
    response = client.post(
        f"/webhooks/api/endpoints/{endpoint.pk}/test", "", content_type="application/json"
    )
    assert response.status_code == 409 and b"disabled" in response.content
    assert not Event.objects.exists() and not Delivery.objects.exists()


def test_the_portal_says_a_disabled_endpoint_gets_no_test_event(tenants_api, webhooks_conf):
    from django_pgqueue.models import Event
    from django_pgqueue.operations import apply_endpoint_operation

    webhooks_conf(PORTAL_APPLICATION="testproject.demo.portal.current_application")
    endpoint, _ = tenants_api
    apply_endpoint_operation("disable", [endpoint.pk])
    client = Client()
    client.force_login(User.objects.create_user("cust_a"))
    response = client.post(f"/webhooks/endpoints/{endpoint.pk}/test/", follow=True)
    assert "enable it to send a test event" in response.content.decode()
    assert not Event.objects.exists() and not Delivery.objects.exists()


@pytest.fixture
def tenants_api(webhooks_conf):
    app = Application.objects.create(uid="cust_a")
    endpoint = Endpoint.objects.create(url="https://hooks.example.com/a", application=app)
    key = create_key("test", CUSTOMER_SCOPES, application="cust_a").key
    return endpoint, Client(headers={"Authorization": f"Bearer {key}"})


# ----- deletion: explicit, through the store ---------------------------------------------


def _delivered(application: str | None, endpoint: Endpoint) -> Delivery:
    from django_pgqueue.models import DeliveryAttempt

    event = send_event("order.paid", {"n": 1}, application=application)
    delivery = event.deliveries.get(endpoint=endpoint)
    DeliveryAttempt.objects.create(delivery=delivery, attempt=1, started_at=timezone.now())
    return delivery


def test_deleting_an_endpoint_takes_its_deliveries_and_attempts_and_keeps_the_rest(
    tenants_api,
):
    from django_pgqueue.models import DeliveryAttempt, Event

    endpoint, client = tenants_api
    other = Endpoint.objects.create(
        url="https://hooks.example.com/b", application=endpoint.application
    )
    mine = _delivered("cust_a", endpoint)
    kept = Delivery.objects.get(event=mine.event, endpoint=other)
    response = client.delete(f"/webhooks/api/endpoints/{endpoint.pk}")
    assert response.status_code == 204
    assert not Endpoint.objects.filter(pk=endpoint.pk).exists()
    assert not Delivery.objects.filter(pk=mine.pk).exists()
    assert not DeliveryAttempt.objects.filter(delivery_id=mine.pk).exists()
    # The event was also sent to another endpoint: it and that delivery stay.
    assert Event.objects.filter(pk=mine.event_id).exists()
    assert Delivery.objects.filter(pk=kept.pk).exists()


def test_deleting_an_application_in_the_admin_takes_its_webhook_rows_only(webhooks_conf):
    from django_pgqueue.models import DeliveryAttempt, Event

    gone = Application.objects.create(uid="cust_a")
    stays = Application.objects.create(uid="cust_b")
    endpoints = {
        app.uid: Endpoint.objects.create(url=f"https://{app.uid}.example.com/", application=app)
        for app in (gone, stays)
    }
    world = Endpoint.objects.create(url="https://global.example.com/")
    lost = [_delivered("cust_a", endpoints["cust_a"])]
    kept = [_delivered("cust_b", endpoints["cust_b"]), _delivered(None, world)]
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    response = client.post(
        reverse("admin:django_pgqueue_application_delete", args=(gone.pk,)), {"post": "yes"}
    )
    assert response.status_code == 302
    assert not Application.objects.filter(pk=gone.pk).exists()
    assert not Endpoint.objects.filter(application_id=gone.pk).exists()
    assert not Event.objects.filter(application_id=gone.pk).exists()
    assert not Delivery.objects.filter(pk__in=[d.pk for d in lost]).exists()
    assert not DeliveryAttempt.objects.filter(delivery_id__in=[d.pk for d in lost]).exists()
    assert Delivery.objects.filter(pk__in=[d.pk for d in kept]).count() == 2
    assert DeliveryAttempt.objects.filter(delivery_id__in=[d.pk for d in kept]).count() == 2


# ----- the doors write no webhook rows themselves ----------------------------------------


def test_the_doors_write_endpoint_rows_only_through_the_store():
    import ast
    from pathlib import Path

    import django_pgqueue

    package = Path(django_pgqueue.__file__).parent
    doors = [
        "admin/endpoints.py",
        "admin/applications.py",
        "api/endpoints.py",
        "api/applications.py",
        "api/audit.py",
        "portal/views.py",
        "portal/forms.py",
        "webhooks/fanout.py",
        "models/webhooks.py",
    ]
    called = ("store", "operations", "super")
    endpoints = ("endpoint", "saved", "obj", "form")
    writes = {
        "delete",
        "execute",
        "create",
        "update",
        "bulk_create",
        "bulk_update",
        "rotate_secret",
    }
    found = []
    for door in doors:
        tree = ast.parse((package / door).read_text())
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = node.func.value
            via = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            # ``audit.delete`` is given the store's delete; ``defaults`` is a dict.
            if node.func.attr in writes and via not in (*called, "audit", "defaults"):
                found.append(f"{door}:{node.lineno} .{node.func.attr}()")
            # Saves of endpoints are the store's save_endpoint (a form only builds one).
            unsaved = any(k.arg == "commit" for k in node.keywords)
            if node.func.attr == "save" and via in endpoints and not unsaved:
                found.append(f"{door}:{node.lineno} .save()")
    assert not found, "\n".join(found)


def test_the_admin_bulk_delete_of_endpoints_goes_through_the_store(webhooks_conf):
    from django_pgqueue.models import DeliveryAttempt, Event

    endpoints = [Endpoint.objects.create(url=f"https://h{i}.example.com/") for i in range(2)]
    kept = Endpoint.objects.create(url="https://kept.example.com/")
    deliveries = [_delivered(None, e) for e in endpoints]
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    response = client.post(
        reverse("admin:django_pgqueue_endpoint_changelist"),
        {
            "action": "delete_selected",
            "_selected_action": [e.pk for e in endpoints],
            "post": "yes",
        },
    )
    assert response.status_code == 302
    assert list(Endpoint.objects.values_list("pk", flat=True)) == [kept.pk]
    assert not DeliveryAttempt.objects.filter(delivery__in=[d.pk for d in deliveries]).exists()
    assert Delivery.objects.filter(endpoint=kept).count() == 2  # its own, of both events
    assert Event.objects.count() == 2


def test_the_api_deletes_an_application_with_its_webhook_rows_and_keys():
    from django_pgqueue.models import ApiKey, DeliveryAttempt, Event

    app = Application.objects.create(uid="cust_a")
    endpoint = Endpoint.objects.create(url="https://a.example.com/", application=app)
    delivery = _delivered("cust_a", endpoint)
    create_key("scoped", CUSTOMER_SCOPES, application="cust_a")
    key = create_key("operator", SCOPES).key
    response = Client().delete(
        "/webhooks/api/applications/cust_a", headers={"Authorization": f"Bearer {key}"}
    )
    assert response.status_code == 204, response.content
    assert not Application.objects.exists() and not Endpoint.objects.exists()
    assert not Event.objects.exists() and not Delivery.objects.filter(pk=delivery.pk).exists()
    assert not DeliveryAttempt.objects.exists()
    assert not ApiKey.objects.filter(application_id=app.pk).exists()
    assert ApiKey.objects.filter(name="operator").exists()
