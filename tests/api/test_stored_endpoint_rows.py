"""An endpoint row whose JSON columns someone wrote by SQL in the wrong shape: the
HTTP API and the admin still show it (tests/webhooks/test_stored_endpoint_rows.py has
the rows and the worker's side)."""

from __future__ import annotations

import pytest

from django_pgqueue.models import Endpoint

from ..webhooks.test_stored_endpoint_rows import MALFORMED, _corrupt

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("api_conf")]


@pytest.mark.parametrize(("column", "value"), MALFORMED)
def test_the_api_and_the_admin_show_it(column, value, admin_client, api):
    endpoint = Endpoint.objects.create(url="https://127.0.0.1:9/h")
    _corrupt(endpoint, column, value)
    client = api("read")
    assert client.get(f"endpoints/{endpoint.pk}").status_code == 200
    assert client.get("endpoints").status_code == 200
    assert admin_client.get("/admin/django_pgqueue/endpoint/").status_code == 200
    page = admin_client.get(f"/admin/django_pgqueue/endpoint/{endpoint.pk}/change/")
    assert page.status_code == 200
