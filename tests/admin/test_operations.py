"""The operator operations' declarations (django_pgqueue.operations) and what is built
from them: guards that agree with their predicates on real rows, an admin derived from
the declarations, one permission per operation enforced on every path, and the
read-only ``is_active``."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from django_pgqueue import operations
from django_pgqueue.admin.row_actions import button_name
from django_pgqueue.models import Job, Status
from django_pgqueue.models.webhooks import BreakerState, Delivery, Endpoint
from django_pgqueue.operations import (
    DELIVERY_OPERATIONS,
    ENDPOINT_OPERATIONS,
    JOB_OPERATIONS,
    EndpointOperation,
    RowOperation,
)

from .conftest import _staff, csrf_client, csrf_token

EVERY_OPERATION = [
    *JOB_OPERATIONS.values(),
    *DELIVERY_OPERATIONS.values(),
    *ENDPOINT_OPERATIONS.values(),
]
MODELS = {"job": Job, "delivery": Delivery, "endpoint": Endpoint}


def _endpoints_in_every_state() -> list[Endpoint]:
    """One endpoint per combination of the columns the endpoint guards read."""
    now = timezone.now()
    endpoints = []
    for n, (active, state, failures, failing) in enumerate(
        itertools.product(
            (True, False), list(BreakerState), (0, 3), (None, now - timedelta(minutes=5))
        )
    ):
        endpoints.append(
            Endpoint.objects.create(
                url=f"https://hooks.example.com/{n}",
                is_active=active,
                breaker_state=state,
                # An open or half-open circuit has a probe time (pgq_ep_open_has_until).
                open_until=None if state == BreakerState.CLOSED else now,
                consecutive_failures=failures,
                failing_since=failing,
            )
        )
    return endpoints


@pytest.mark.django_db
@pytest.mark.parametrize(
    "op", [op for op in ENDPOINT_OPERATIONS.values() if op.set_clause], ids=lambda op: op.name
)
def test_endpoint_guard_and_predicate_agree_on_every_state(op: EndpointOperation):
    endpoints = _endpoints_in_every_state()
    assert len(endpoints) == 2 * len(BreakerState) * 2 * 2
    with transaction.atomic():
        result = operations.apply_endpoint_operation(op.name, [e.pk for e in endpoints])
        transaction.set_rollback(True)
    expected = {e.pk for e in endpoints if op.applies(e)}
    assert set(result.changed) == expected
    assert 0 < len(expected) < len(endpoints)  # the guard tells rows apart


@pytest.mark.parametrize(
    ("op", "make"),
    [(op, "make_job") for op in JOB_OPERATIONS.values()]
    + [(op, "make_delivery") for op in DELIVERY_OPERATIONS.values()],
    ids=lambda v: getattr(v, "kind", "") + "-" + getattr(v, "name", v),
)
def test_row_guard_and_predicate_agree_on_every_state(op: RowOperation, make: str, request):
    factory = request.getfixturevalue(make)
    rows = [factory(status) for status in Status]
    model = MODELS[op.kind]
    with transaction.atomic():
        result = operations.apply_operation(model, op.name, [r.pk for r in rows])
        after = dict(model.objects.filter(pk__in=[r.pk for r in rows]).values_list("pk", "status"))
        transaction.set_rollback(True)
    assert set(result.changed) == {r.pk for r in rows if op.applies(r)}
    for row in rows:
        if row.pk in result.changed and row.status != Status.IN_PROGRESS:
            assert after[row.pk] == op.result_state


@pytest.mark.django_db
@pytest.mark.parametrize("kind", list(MODELS))
def test_the_admin_is_built_from_the_declarations(kind: str):
    model_admin = admin.site._registry[MODELS[kind]]
    declared = operations.OPERATIONS[kind]
    assert model_admin.operations is declared
    assert list(model_admin.actions) == [op.name for op in declared.values() if op.bulk_label]
    assert set(model_admin.actions_detail) == {button_name(op) for op in declared.values()}
    for op in declared.values():
        button = getattr(model_admin, button_name(op))
        assert button.permission == op.permission
        assert button.short_description == op.label and button.style == op.style
        assert button.applies == op.applies
        reverse(f"admin:{button_name(op)}", args=(1,))
        if op.bulk_label:
            action = getattr(type(model_admin), op.name)
            assert action.allowed_permissions == [op.permission]
            assert action.short_description == op.bulk_label
    # Every permission an operation names exists (Meta.permissions of the model).
    codenames = set(
        Permission.objects.filter(content_type__app_label="django_pgqueue").values_list(
            "codename", flat=True
        )
    )
    assert {op.permission for op in declared.values()} <= codenames


def _target(op, make_job, make_delivery) -> Any:
    """A row or endpoint ``op`` applies to."""
    if isinstance(op, RowOperation):
        return (make_job if op.kind == "job" else make_delivery)(op.allowed[0])
    endpoint = Endpoint.objects.create(url="https://hooks.example.com/t", consecutive_failures=2)
    if op.name == "enable":
        Endpoint.objects.filter(pk=endpoint.pk).update(is_active=False)
        endpoint.refresh_from_db()
    assert op.applies(endpoint)
    return endpoint


def _state(obj: Any) -> tuple:
    obj.refresh_from_db()
    if isinstance(obj, Endpoint):
        return (obj.is_active, obj.breaker_state, obj.consecutive_failures, obj.secret_ciphertext)
    return (obj.status, obj.next_attempt_at, getattr(obj, "abort_requested_at", None))


@pytest.mark.parametrize("op", EVERY_OPERATION, ids=lambda op: f"{op.kind}-{op.name}")
def test_each_operation_is_refused_without_its_permission(op, make_job, make_delivery):
    obj = _target(op, make_job, make_delivery)
    before = _state(obj)
    # Every other operator permission, and the view permissions of all three models.
    others = {o.permission for o in EVERY_OPERATION} - {op.permission}
    user = _staff("almost", *others, "view_job", "view_delivery", "view_endpoint")
    client = csrf_client(user)
    changelist = reverse(f"admin:django_pgqueue_{op.kind}_changelist")
    token = csrf_token(client, changelist)
    url = reverse(f"admin:{button_name(op)}", args=(obj.pk,))

    assert url not in client.get(changelist).content.decode()
    assert client.get(url).status_code == 403
    assert client.post(url, {"csrfmiddlewaretoken": token}).status_code == 403
    if op.bulk_label:
        assert f'value="{op.name}"' not in client.get(changelist).content.decode()
        for confirm in ({}, {"post": "yes"}):
            data = {"action": op.name, "_selected_action": [obj.pk], "csrfmiddlewaretoken": token}
            assert client.post(changelist, {**data, **confirm}).status_code == 403
    assert _state(obj) == before
    assert not LogEntry.objects.exists()

    # The permission alone (with the view permission) is enough.
    allowed = csrf_client(_staff("allowed", op.permission, f"view_{op.kind}", "view_delivery"))
    assert allowed.get(url).status_code == 200


def test_a_user_with_only_one_of_the_two_row_permissions_sees_only_its_buttons(make_job):
    dead, pending = make_job(Status.DEAD), make_job(Status.PENDING)
    client = csrf_client(_staff("canceller", "view_job", "cancel_job"))
    page = client.get(reverse("admin:django_pgqueue_job_changelist")).content.decode()
    assert reverse("admin:pgqueue_job_cancel", args=(pending.pk,)) in page
    assert reverse("admin:pgqueue_job_replay", args=(dead.pk,)) not in page
    assert 'value="cancel"' in page and 'value="replay"' not in page


@pytest.mark.django_db
def test_is_active_cannot_be_changed_through_the_form():
    editor = _staff("editor", "view_endpoint", "change_endpoint")
    client = csrf_client(editor)
    active = Endpoint.objects.create(url="http://127.0.0.1:9/on")
    inactive = Endpoint.objects.create(url="http://127.0.0.1:9/off")
    Endpoint.objects.filter(pk=inactive.pk).update(is_active=False)
    for endpoint, posted in ((active, {}), (inactive, {"is_active": "on"})):
        change = reverse("admin:django_pgqueue_endpoint_change", args=(endpoint.pk,))
        page = client.get(change).content.decode()
        assert 'name="is_active"' not in page
        token = csrf_token(client, change)
        response = client.post(
            change,
            {
                "csrfmiddlewaretoken": token,
                "url": endpoint.url,
                "description": "edited",
                "event_types": "[]",
                "channels": "[]",
                "headers": "{}",
                "rate_period": "1",
                "ordering": "none",
                **posted,
            },
        )
        assert response.status_code == 302, response.context["adminform"].form.errors
        was = endpoint.is_active if endpoint is active else False
        endpoint.refresh_from_db()
        assert endpoint.description == "edited" and endpoint.is_active == was
    # Nor through the enable and disable operations, which need manage_endpoint.
    url = reverse("admin:pgqueue_endpoint_disable", args=(active.pk,))
    assert client.post(url, {"csrfmiddlewaretoken": token}).status_code == 403
    assert Endpoint.objects.get(pk=active.pk).is_active


@pytest.mark.django_db
def test_disable_writes_the_callers_reason_or_the_default_and_keeps_an_earlier_one():
    mine, default = (Endpoint.objects.create(url=f"https://hooks.example.com/{n}") for n in "ab")
    result = operations.apply_endpoint_operation("disable", [mine.pk], reason="Moved to v2")
    assert list(result.changed) == [mine.pk]
    operations.apply_endpoint_operation("disable", [default.pk])
    reasons = dict(Endpoint.objects.values_list("pk", "disabled_reason"))
    assert reasons == {mine.pk: "Moved to v2", default.pk: "Disabled by an operator"}
    # Already disabled: the guard skips it, and the reason it has stays.
    again = operations.apply_endpoint_operation("disable", [mine.pk], reason="Other")
    assert again.skipped == {mine.pk: "already done"}
    assert Endpoint.objects.get(pk=mine.pk).disabled_reason == "Moved to v2"
    # Only disabling has a reason; enabling clears it.
    with pytest.raises(ValueError, match="takes no reason"):
        operations.apply_endpoint_operation("enable", [mine.pk], reason="Back")
    operations.apply_endpoint_operation("enable", [mine.pk])
    assert Endpoint.objects.get(pk=mine.pk).disabled_reason == ""


@pytest.mark.django_db
def test_rotating_a_secret_goes_through_the_operation_and_keeps_the_old_one():
    endpoint = Endpoint.objects.create(url="https://hooks.example.com/r")
    first = endpoint.secret
    stale = Endpoint.objects.get(pk=endpoint.pk)  # another process's copy
    second = operations.rotate_secret(endpoint)
    # Rotating the stale copy keeps the secret the first rotation made current.
    third = operations.rotate_secret(stale)
    signing = Endpoint.objects.get(pk=endpoint.pk).active_secrets()
    assert signing[0] == third and {first, second} <= set(signing)
    assert stale.secret == third
