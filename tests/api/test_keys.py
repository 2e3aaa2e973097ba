"""API keys: the command, hashing, revocation, scopes and the rate limit."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from django_pgqueue.api.keys import create_key, hash_key
from django_pgqueue.authority import OPERATOR_SCOPES
from django_pgqueue.models import ApiKey, Event

from .conftest import ApiClient, problem_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("api_conf")]


def create(*args: str) -> str:
    out = io.StringIO()
    call_command("pgqueue_api_key", "create", *args, stdout=out)
    return out.getvalue().strip().splitlines()[-1]


def test_the_command_prints_the_key_once_and_stores_its_hash(tenants):
    key = create(
        "--name", "billing", "--scope", "send", "--scope", "read", "--application", "cust_a"
    )
    stored = ApiKey.objects.get()
    assert key.startswith(f"pgq_{stored.prefix}_")
    assert stored.key_hash == hash_key(key) and key not in str(stored.__dict__)
    assert stored.scopes == ["read", "send"] and stored.application == tenants["a"]
    response = ApiClient(key).post("events", {"event_type": "order.paid", "payload": {}})
    assert response.status_code == 202 and response.json()["application"] == "cust_a"
    out = io.StringIO()
    call_command("pgqueue_api_key", "list", stdout=out)
    assert f"pgq_{stored.prefix}\tbilling\tread,send\tcust_a" in out.getvalue()
    assert key not in out.getvalue()


def test_the_command_creates_a_key_with_the_secrets_scope(tenants):
    key = create("--name", "rotator", "--scope", "secrets")
    assert ApiKey.objects.get().scopes == ["secrets"]
    endpoint = tenants["ep_a"]
    response = ApiClient(key).post(f"endpoints/{endpoint.pk}/rotate-secret")
    assert response.status_code == 200, response.content
    # Only that: no reading, no managing.
    problem_of(ApiClient(key).get(f"endpoints/{endpoint.pk}"), 403)
    problem_of(ApiClient(key).post(f"endpoints/{endpoint.pk}/disable"), 403)


def test_a_revoked_key_is_refused(tenants):
    key = create("--name", "old", "--scope", "send")
    call_command("pgqueue_api_key", "revoke", key[:16], stdout=io.StringIO())
    problem_of(ApiClient(key).post("events", {"event_type": "a", "payload": {}}), 401)
    with pytest.raises(CommandError):
        call_command("pgqueue_api_key", "revoke", key[:16], stdout=io.StringIO())


@pytest.mark.parametrize(
    "args",
    [
        ("--name", "x", "--scope", "send", "--application", "nobody"),
        ("--name", " ", "--scope", "send"),
    ],
)
def test_the_command_refuses_bad_options(tenants, args):
    with pytest.raises(CommandError):
        create(*args)
    assert not ApiKey.objects.exists()


@pytest.mark.parametrize(
    "header",
    [
        None,
        "Bearer",
        "Basic abc",
        "Bearer pgq_",
        "Bearer pgq_0123456789ab_wrong",
        "Bearer nonsense",
    ],
)
def test_requests_without_a_valid_key_are_401(tenants, api, header):
    real = api("send").key
    client = ApiClient(None)
    headers = {} if header is None else {"Authorization": header}
    body = problem_of(
        client.post("events", {"event_type": "a", "payload": {}}, headers=headers), 401
    )
    assert "Bearer" in client.post("events", {}, headers=headers)["WWW-Authenticate"]
    assert real not in body["detail"]


def test_a_key_with_the_right_prefix_and_a_wrong_secret_is_401(tenants, api):
    real = api("send").key
    forged = real[:-4] + ("aaaa" if not real.endswith("aaaa") else "bbbb")
    problem_of(ApiClient(forged).post("events", {"event_type": "a", "payload": {}}), 401)


def test_the_openapi_document_is_served_and_says_3_1(client):
    response = client.get("/webhooks/api/openapi.json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.1.")
    assert "/events" in document["paths"]


def test_the_list_starts_with_a_header_naming_its_columns(tenants):
    create("--name", "billing", "--scope", "send")
    out = io.StringIO()
    call_command("pgqueue_api_key", "list", stdout=out)
    header, *rows = out.getvalue().splitlines()
    assert header.split("\t") == ["prefix", "name", "scopes", "application", "last used", "state"]
    assert len(rows) == 1 and len(rows[0].split("\t")) == 6


@pytest.mark.parametrize("scope", sorted(OPERATOR_SCOPES))
def test_no_key_of_an_application_is_made_with_an_operators_scope(tenants, scope):
    refusal = f"The '{scope}' scope is for operators only"
    with pytest.raises(ValueError, match=refusal):
        create_key("customer", ["read", scope], application="cust_a")
    with pytest.raises(CommandError, match=refusal):
        create("--name", "c", "--scope", scope, "--application", "cust_a")
    assert not ApiKey.objects.exists()
    assert create_key("operator", [scope]).api_key.scopes == [scope]


@pytest.mark.parametrize(
    "stored",
    [
        "42",
        "null",
        '"send"',
        '{"send": true}',  # an object's keys are not a list of scopes
        "[1, 2]",
        '["send", {"x": 1}]',
        '["send", "root"]',  # no such scope
        "[]",
    ],
)
def test_a_key_whose_stored_scopes_are_malformed_is_refused_not_a_500(tenants, stored):
    """The key row is read back from the database, where anyone with SQL may have
    written it. Scopes that are not a list of known scope names grant nothing: the
    request is refused with a problem naming the key's scopes, never a 500 and never
    what an object's keys or a string's letters would spell."""
    key = create_key("k", ["send"]).key
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("UPDATE pgqueue_api_key SET scopes = %s::jsonb", [stored])
    body = problem_of(ApiClient(key).post("events", {"event_type": "a", "payload": {}}), 403)
    assert "scopes" in body["detail"]
    assert not Event.objects.exists()


def test_a_customer_key_holding_an_operators_scope_in_its_row_is_refused(tenants):
    """The rule that an application's key holds no operator's scope is checked where
    the key is read, as where it is made: a row edited by SQL does not get past it."""
    key = create_key("customer", ["read"], application="cust_a").key
    ApiKey.objects.update(scopes=["read", "queues"])
    body = problem_of(ApiClient(key).get("queues"), 403)
    assert "scopes" in body["detail"]


def test_the_list_shows_a_key_with_malformed_stored_scopes_as_invalid(tenants):
    """One bad row does not take the listing down: it is listed, its scopes said to
    be invalid and why."""
    from django.db import connection

    create_key("good", ["send"])
    bad = create_key("bad", ["send"]).api_key
    with connection.cursor() as cursor:
        cursor.execute("UPDATE pgqueue_api_key SET scopes = '42'::jsonb WHERE id = %s", [bad.pk])
    out = io.StringIO()
    call_command("pgqueue_api_key", "list", stdout=out)
    rows = {line.split("\t")[1]: line.split("\t")[2] for line in out.getvalue().splitlines()[1:]}
    assert rows["good"] == "send"
    assert rows["bad"].startswith("invalid:")
