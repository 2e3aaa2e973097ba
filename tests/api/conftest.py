"""Fixtures of the HTTP API tests: keys, applications and a JSON client on Django's
test Client (real PostgreSQL, real transactions)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from django_pgqueue.api.keys import CUSTOMER_SCOPES, SCOPES, create_key
from django_pgqueue.models import Application, Delivery, Endpoint, Status
from django_pgqueue.webhooks.fanout import send_event
from testproject.demo import tasks

from ..webhooks.conftest import FAST_WEBHOOKS

API = "/webhooks/api/"


class ApiClient:
    """Django's test Client, speaking JSON with one bearer key."""

    def __init__(self, key: str | None) -> None:
        self.client = Client()
        self.key = key

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
        **query: Any,
    ) -> Any:
        extra = dict(headers or {})
        if self.key is not None:
            extra.setdefault("Authorization", f"Bearer {self.key}")
        data: Any = raw if raw is not None else (json.dumps(body) if body is not None else "")
        if method == "get":
            return self.client.get(API + path, query, headers=extra)
        return getattr(self.client, method)(
            API + path, data, content_type=content_type, headers=extra, QUERY_STRING=""
        )

    def get(self, path: str, **query: Any) -> Any:
        return self.call("get", path, **query)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        return self.call("post", path, body, **kwargs)

    def patch(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        return self.call("patch", path, body, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.call("delete", path, **kwargs)


@pytest.fixture
def api_conf(settings: Any) -> Callable[..., None]:
    """``PGQUEUE["API"]`` (and the test receivers' webhook settings) for a test."""

    def configure(**api: Any) -> None:
        settings.PGQUEUE = {**settings.PGQUEUE, "WEBHOOKS": dict(FAST_WEBHOOKS), "API": api}

    configure()
    return configure


@pytest.fixture
def api(api_conf: Any, transactional_db: None) -> Callable[..., ApiClient]:
    """``api("send", "read", application="cust_a")``: a client with a new key (every
    scope it may hold when none is named)."""

    def make(
        *scopes: str, application: str | None = None, rate_limit: int | None = None
    ) -> ApiClient:
        new = create_key(
            "test",
            scopes or (SCOPES if application is None else CUSTOMER_SCOPES),
            application=application,
            rate_limit=rate_limit,
        )
        return ApiClient(new.key)

    return make


@pytest.fixture
def tenants(transactional_db: None) -> dict[str, Any]:
    """Two applications with one endpoint each, and one global endpoint."""
    a = Application.objects.create(uid="cust_a", name="A")
    b = Application.objects.create(uid="cust_b", name="B")
    return {
        "a": a,
        "b": b,
        "ep_a": Endpoint.objects.create(url="https://127.0.0.1:9/a", application=a),
        "ep_b": Endpoint.objects.create(url="https://127.0.0.1:9/b", application=b),
        "ep_global": Endpoint.objects.create(url="https://127.0.0.1:9/g"),
    }


@pytest.fixture
def world(api_conf, tenants):
    """Each application has an event delivered (dead) to its endpoint; one job waits."""
    send_event("a.order", {"n": 1}, application="cust_a")
    send_event("b.secret", {"n": 2}, application="cust_b")
    Delivery.objects.update(status=Status.DEAD, finished_at="2026-01-01T00:00:00Z")
    tenants["dlv_a"] = Delivery.objects.get(endpoint=tenants["ep_a"])
    tenants["dlv_b"] = Delivery.objects.get(endpoint=tenants["ep_b"])
    tenants["job"] = int(tasks.add.enqueue(1, 2).id)
    return tenants


def problem_of(response: Any, status: int) -> dict[str, Any]:
    """The problem body of ``response``, checked to be RFC 9457 with ``status``."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    assert response["Content-Type"] == "application/problem+json"
    body = json.loads(response.content)
    assert body["status"] == status and body["title"] and body["detail"] and body["type"]
    return body
