"""The OpenAPI document is valid and the API answers as it says: every operation's
answers (successes and problems) have a documented status and match its schema."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from django_pgqueue import queues
from django_pgqueue.api.openapi import build_document

from .conftest import ApiClient
from .test_isolation import ROUTES, _path

pytestmark = pytest.mark.django_db(transaction=True)

DOCUMENT = build_document("/webhooks/api")


def _validate(schema: dict, value: object) -> None:
    root = {"components": DOCUMENT["components"], **schema}
    Draft202012Validator(root).validate(value)


def test_every_schema_is_a_valid_json_schema():
    for name, schema in DOCUMENT["components"]["schemas"].items():
        Draft202012Validator.check_schema(schema), name
    assert DOCUMENT["openapi"] == "3.1.0"
    ids = [op["operationId"] for item in DOCUMENT["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize(("method", "path", "scope", "body"), ROUTES)
def test_every_operation_documents_the_scope_its_route_checks(method, path, scope, body):
    from django.urls import resolve

    operation = DOCUMENT["paths"][_template(path)][method]
    assert operation["description"].startswith(f"Scope: `{scope}`.")
    view = resolve("/webhooks/api/" + _template(path).lstrip("/").replace("{id}", "1"))
    assert view.func.scopes[method.upper()] == scope


def _template(path: str) -> str:
    return "/" + (
        path.replace("{ep}", "{id}")
        .replace("{dlv}", "{id}")
        .replace("{job}", "{id}")
        .replace("{app}", "{uid}")
    )


def _check(response, method: str, path: str) -> None:
    operation = DOCUMENT["paths"][_template(path)][method]
    documented = operation["responses"]
    status = str(response.status_code)
    assert status in documented, (method, path, status, response.content[:300])
    content = documented[status].get("content")
    if content is None:
        assert response.content == b""
        return
    [(media, spec)] = content.items()
    assert response["Content-Type"] == media
    _validate(spec["schema"], json.loads(response.content))


def _body(body, objects):
    text = json.dumps(body).replace('"{dlv}"', str(objects["dlv_b"].pk))
    # Not another application's objects here: this key sees everything.
    return json.loads(text.replace("cust_b", "cust_a"))


@pytest.mark.parametrize(("method", "path", "scope", "body"), ROUTES)
def test_every_operation_answers_as_documented(api, world, method, path, scope, body):
    client = api()
    if "{name}" in path:
        queues.configure("reports", concurrency=2)  # the queue the path names
    if body is not None:
        request_schema = DOCUMENT["paths"][_template(path)][method]["requestBody"]
        _validate(request_schema["content"]["application/json"]["schema"], _body(body, world))
    response = client.call(method, _path(path, world), _body(body, world) if body else None)
    assert response.status_code < 300, response.content
    _check(response, method, path)
    # Problems match the Problem schema and are documented: no key, and bad input.
    _check(ApiClient(None).call(method, _path(path, world)), method, path)
    if body is not None:
        _check(client.call(method, _path(path, world), raw=b"{"), method, path)
        _check(client.call(method, _path(path, world), {"nonsense": 1}), method, path)
        _check(
            client.call(method, _path(path, world), raw=b"{}", content_type="text/plain"),
            method,
            path,
        )
    if "{" in path:
        missing = (
            path.replace("{ep}", "999999")
            .replace("{dlv}", "999999")
            .replace("{job}", "999999")
            .replace("{app}", "nobody")
        )
        _check(client.call(method, missing, _body(body, world) if body else None), method, path)


def test_counts_say_the_least_value_the_database_accepts():
    """The schema's minimum of a count is the model's, which the table's CHECK holds:
    a job or delivery is tried at least once, and never tried a negative number of
    times."""
    schemas = DOCUMENT["components"]["schemas"]
    for name in ("Job", "Delivery"):
        props = schemas[name]["properties"]
        assert props["max_attempts"]["minimum"] == 1, name
        assert props["attempts"]["minimum"] == 0, name
