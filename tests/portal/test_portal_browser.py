"""The customer portal in a real Chromium: a customer adds an endpoint (and reads why
a private address is refused), reveals its secret, and cannot reach another
customer's endpoint by changing the URL or a form's target."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection

from ..admin.test_browser import CHROMIUM_ARGS, chromium  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def in_thread(fn: Any) -> Any:
    """Run ORM code off Playwright's event-loop thread (see tests/admin/test_browser.py)."""

    def run() -> Any:
        try:
            return fn()
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


def test_a_customer_manages_only_their_own_endpoints_in_a_browser(
    chromium,  # noqa: F811
    live_server,
    settings,
):
    from django.contrib.auth.models import User
    from django.test import Client
    from playwright.sync_api import expect, sync_playwright

    from django_pgqueue.models import Application, Endpoint

    settings.PGQUEUE = {
        **settings.PGQUEUE,
        "WEBHOOKS": {
            "ALLOW_NETWORKS": [],
            "PORTAL_APPLICATION": "testproject.demo.portal.current_application",
        },
    }
    mine = Endpoint.objects.create(
        url="https://a.example.com/hook", application=Application.objects.create(uid="cust_a")
    )
    theirs = Endpoint.objects.create(
        url="https://b.example.com/hook", application=Application.objects.create(uid="cust_b")
    )
    their_secret = theirs.secret
    client = Client()
    client.force_login(User.objects.create_user("cust_a"))
    session = client.cookies["sessionid"].value
    base = live_server.url

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        context = browser.new_context(java_script_enabled=True)
        context.add_cookies([{"name": "sessionid", "value": session, "url": base}])
        page = context.new_page()
        page.set_default_timeout(15_000)

        page.goto(f"{base}/webhooks/")
        expect(page.locator("#pgq-endpoints")).to_contain_text("a.example.com")
        expect(page.locator("body")).not_to_contain_text("b.example.com")

        page.click("text=Add an endpoint")
        page.fill("#id_url", "https://127.0.0.1/hook")
        page.fill("#id_event_types", "order.*")
        page.click("button[type=submit]")
        expect(page.locator(".errorlist")).to_contain_text("This URL cannot receive webhooks")
        page.fill("#id_url", "https://93.184.216.34/hook")
        page.click("button[type=submit]")
        expect(page.locator("h1")).to_have_text("https://93.184.216.34/hook")

        page.goto(f"{base}/webhooks/endpoints/{mine.pk}/")
        page.click("text=Reveal the secret")
        expect(page.locator("#pgq-secret")).to_have_text(mine.secret)

        # Another customer's id in the URL: not found, nothing of theirs shown.
        response = page.goto(f"{base}/webhooks/endpoints/{theirs.pk}/")
        assert response is not None and response.status == 404
        expect(page.locator("body")).not_to_contain_text("b.example.com")

        # A form pointed at another customer's endpoint: refused the same way.
        page.goto(f"{base}/webhooks/endpoints/{mine.pk}/")
        rotate = page.locator(f"form[action='/webhooks/endpoints/{mine.pk}/rotate/']")
        rotate.evaluate(f"f => f.action = '/webhooks/endpoints/{theirs.pk}/rotate/'")
        with page.expect_navigation() as navigation:
            page.click("text=Rotate the secret")
        assert navigation.value is not None and navigation.value.status == 404
        expect(page.locator("body")).not_to_contain_text("whsec_")
        browser.close()

    assert in_thread(lambda: Endpoint.objects.get(pk=theirs.pk).secret) == their_secret
    assert in_thread(lambda: Endpoint.objects.filter(application__uid="cust_a").count()) == 2
