"""The admin by application: filters on endpoints, events and deliveries, and the
dashboard's endpoints that are not delivering, grouped by application."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_pgqueue import send_event
from django_pgqueue.models import Application, Delivery, Endpoint

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client


@pytest.fixture
def two_customers():
    a = Application.objects.create(uid="cust_a", name="Alpha Ltd")
    b = Application.objects.create(uid="cust_b", name="Beta Inc")
    ea = Endpoint.objects.create(url="https://a.example.com/hook", application=a)
    eb = Endpoint.objects.create(url="https://b.example.com/hook", application=b)
    eg = Endpoint.objects.create(url="https://global.example.com/hook")
    send_event("order.paid", {"n": 1}, application="cust_a")
    send_event("order.shipped", {"n": 2}, application="cust_b")
    send_event("order.global", {"n": 3})
    return a, b, ea, eb, eg


def results(response) -> str:
    """The changelist's result table (the filters list every value)."""
    page = response.content.decode()
    table = page[page.index('id="result_list"') :]
    return table[: table.index("</table>")]


@pytest.mark.parametrize(
    ("changelist", "shows_a", "shows_b"),
    [
        ("endpoint", "a.example.com", "b.example.com"),
        ("event", "order.paid", "order.shipped"),
        ("delivery", "order.paid", "order.shipped"),
    ],
)
def test_changelists_filter_by_application(
    admin_client, two_customers, changelist, shows_a, shows_b
):
    url = f"/admin/django_pgqueue/{changelist}/"
    page = results(admin_client.get(url, {"application": "cust_a"}))
    assert shows_a in page and shows_b not in page
    listing = admin_client.get(url).content.decode()
    assert "Alpha Ltd" in listing and "Global (no application)" in listing
    global_only = results(admin_client.get(url, {"application": "-"}))
    assert shows_a not in global_only and shows_b not in global_only


def test_dashboard_groups_endpoints_not_delivering_by_application(admin_client, two_customers):
    _a, _b, ea, _eb, eg = two_customers
    Endpoint.objects.filter(pk__in=[ea.pk, eg.pk]).update(
        is_active=False, disabled_reason="410 Gone"
    )
    page = admin_client.get("/admin/django_pgqueue/job/dashboard/").content.decode()
    attention = page[page.index('id="pgq-attention"') :]
    attention = attention[: attention.index("</div>")]
    assert "Global endpoints" in attention and "Application cust_a" in attention
    assert attention.index("Global endpoints") < attention.index("global.example.com")
    assert attention.index("Application cust_a") < attention.index("a.example.com/hook")
    assert "b.example.com" not in attention and Delivery.objects.count() == 3


def test_application_admin_links_its_endpoints(admin_client, two_customers):
    page = admin_client.get("/admin/django_pgqueue/application/").content.decode()
    assert "cust_a" in page and "/admin/django_pgqueue/endpoint/?application=cust_a" in page
