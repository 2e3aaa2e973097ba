"""Admin fixtures: staff users with and without the operator permission, CSRF-enforcing
clients and jobs in every state."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from django_pgqueue.models import Job, Status


def _staff(username: str, *codenames: str) -> User:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="django_pgqueue", codename__in=codenames)
    )
    return user


@pytest.fixture
def operator(db: None) -> User:
    """Staff who may view jobs and run every operation on them."""
    return _staff("operator", "view_job", "replay_job", "cancel_job")


@pytest.fixture
def viewer(db: None) -> User:
    """Staff who may only look."""
    return _staff("viewer", "view_job")


def csrf_client(user: User) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


@pytest.fixture
def operator_client(operator: User) -> Client:
    return csrf_client(operator)


@pytest.fixture
def viewer_client(viewer: User) -> Client:
    return csrf_client(viewer)


def csrf_token(client: Client, url: str) -> str:
    """Load ``url`` (a page with a form) and return the CSRF token its cookie holds."""
    response = client.get(url)
    assert response.status_code == 200, response.status_code
    return client.cookies["csrftoken"].value


@pytest.fixture
def make_job(db: None) -> Callable[..., Job]:
    """``make_job(Status.DEAD, queue_name="emails")``: a job as a worker would leave it."""

    def make(status: str = Status.PENDING, **fields: Any) -> Job:
        now = timezone.now()
        values: dict[str, Any] = {
            "task_path": "testproject.demo.tasks.add",
            "args": [1, 2],
            "status": status,
        }
        if status == Status.IN_PROGRESS:
            values.update(
                locked_by=uuid.uuid4(),
                locked_until=now + timedelta(minutes=5),
                attempts=1,
                worker_id="host:1:w",
            )
        if status in (Status.SUCCEEDED, Status.DEAD, Status.CANCELLED):
            values["finished_at"] = now
        if status in (Status.DEAD, Status.FAILED):
            values.update(
                attempts=values.get("attempts", 5),
                last_error="ValueError: order 7 has an invalid address",
                errors=[
                    {
                        "attempt": 1,
                        "at": now.isoformat(),
                        "worker_id": "host:1:w",
                        "exception_class_path": "builtins.ValueError",
                        "traceback": 'Traceback (most recent call last):\n  File "x.py"\n'
                        "ValueError: order 7 has an invalid address",
                    }
                ],
            )
        if status == Status.FAILED:
            values["next_attempt_at"] = now + timedelta(hours=1)
        values.update(fields)
        return Job.objects.create(**values)

    return make


@pytest.fixture
def make_delivery(db: None, make_job: Callable[..., Job]) -> Callable[..., Any]:
    """``make_delivery(Status.DEAD, endpoint=ep)``: a delivery of a fresh event."""
    from django_pgqueue.models.webhooks import Delivery, Endpoint, Event

    counter = iter(range(1, 1_000_000))

    def make(status: str = Status.PENDING, endpoint: Endpoint | None = None, **fields: Any):
        n = next(counter)
        endpoint = endpoint or Endpoint.objects.create(url=f"https://hooks.example.com/{n}")
        event = Event.objects.create(
            event_type="order.paid",
            payload={"order": n},
            body=f'{{"order":{n}}}',
            msg_id=f"msg_{n}",
        )
        # Reuse the job factory's state-consistent fields.
        template = make_job(status)
        values = {
            f.name: getattr(template, f.name)
            for f in Job._meta.concrete_fields
            if f.name in {g.name for g in Delivery._meta.concrete_fields} and f.name != "id"
        }
        template.delete()
        values.update(fields)
        return Delivery.objects.create(event=event, endpoint=endpoint, **values)

    return make


@pytest.fixture
def webhook_operator(db: None) -> User:
    return _staff(
        "hookop",
        "view_delivery",
        "replay_delivery",
        "cancel_delivery",
        "view_endpoint",
        "change_endpoint",
        "manage_endpoint",
        "manage_endpoint_secret",
        "view_event",
        "view_job",
    )


@pytest.fixture
def webhook_viewer(db: None) -> User:
    return _staff("hookviewer", "view_delivery", "view_endpoint", "view_event", "view_job")
