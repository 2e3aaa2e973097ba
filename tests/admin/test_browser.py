"""End to end in a real Chromium: find a dead job in the DLQ, replay it, watch it run.

Needs the ``playwright`` package (dev extra) and Debian's Chromium
(``apt-get install chromium``); the fixture installs Chromium when it can (root
with apt-get) and otherwise skips with the reason. Playwright's own browser
downloads are never used.

``PGQUEUE_UPDATE_SCREENSHOTS=1`` writes the screenshots used by docs/admin.md
into docs/images/; otherwise they go to the test's temporary directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import warnings
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from django_pgqueue.models import Job, Status

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _install_chromium() -> str:
    """Debian's Chromium, installed with apt-get if missing and possible; else ''."""
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    if shutil.which("apt-get") and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
            subprocess.run(cmd, env=env, capture_output=True, timeout=600, check=False)
    return CHROMIUM if os.path.exists(CHROMIUM) else ""


@pytest.fixture(scope="module")
def chromium() -> str:
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (dev extra)")
    path = _install_chromium()
    if not path:
        reason = (
            f"BROWSER TEST SKIPPED: no Chromium at {CHROMIUM} and `apt-get install chromium` "
            "was not possible here (needs root and Debian's package index)"
        )
        warnings.warn(reason, pytest.PytestWarning, stacklevel=1)
        pytest.skip(reason)
    return path


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    if os.environ.get("PGQUEUE_UPDATE_SCREENSHOTS") == "1":
        target = REPO / "docs" / "images"
        target.mkdir(parents=True, exist_ok=True)
        return target
    return tmp_path


def job_status(pk: int) -> str:
    """Read a job's status from a thread of its own.

    Playwright's sync API runs an event loop in the test's thread: Django would
    refuse ORM calls there (SynchronousOnlyOperation), and its per-context
    connections would outlive the test. A short-lived thread has neither problem.
    """

    def read() -> str:
        try:
            return Job.objects.values_list("status", flat=True).get(pk=pk)
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(read).result()


def log_in(pw: Any, chromium: str, base: str, width: int) -> tuple[Any, Any]:
    """A browser and a page of ``width`` px, logged in as the demo superuser (who
    must exist), on the admin index."""
    from playwright.sync_api import expect

    browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.set_default_timeout(15_000)
    page.goto(f"{base}/admin/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "demo-only-password")
    page.click("input[type=submit]")
    expect(page.locator("#pgqueue-module")).to_be_visible()
    return browser, page


def _demo_rows() -> tuple[Job, object]:
    """A dead job to replay, some history around it, and a dead webhook delivery."""
    from django_pgqueue.models.webhooks import (
        BreakerState,
        Delivery,
        DeliveryAttempt,
        Endpoint,
        Event,
    )

    now = timezone.now()
    error = {
        "attempt": 3,
        "at": now.isoformat(),
        "worker_id": "web-1:4242:a1b2",
        "exception_class_path": "builtins.ConnectionError",
        "traceback": "Traceback (most recent call last):\n"
        '  File "testproject/demo/tasks.py", line 28, in flaky_charge\n'
        "ConnectionError: payment gateway timed out (attempt 3)",
    }
    dead = Job.objects.create(
        task_path="testproject.demo.tasks.add",
        args=[2, 3],
        status=Status.DEAD,
        attempts=3,
        max_attempts=3,
        finished_at=now,
        last_error="ConnectionError: payment gateway timed out (attempt 3)",
        errors=[{**error, "attempt": n} for n in (1, 2, 3)],
    )
    for n in range(6):
        Job.objects.create(
            task_path="testproject.demo.tasks.send_receipt",
            queue_name="emails",
            args=[n],
            status=Status.SUCCEEDED,
            finished_at=now,
            result=f"receipt for order {n} sent",
        )
    Job.objects.create(
        task_path="testproject.demo.tasks.flaky_charge",
        queue_name="payments",
        args=[7],
        status=Status.FAILED,
        attempts=1,
        next_attempt_at=now + timedelta(minutes=5),
        last_error=error["traceback"].splitlines()[-1],
        errors=[error],
    )
    Job.objects.create(
        task_path="testproject.demo.tasks.always_fails",
        queue_name="emails",
        args=[13],
        status=Status.DEAD,
        attempts=3,
        max_attempts=3,
        finished_at=now,
        last_error="ValueError: order 13 has an invalid address",
    )
    endpoint = Endpoint.objects.create(url="https://hooks.example.com/orders")
    Endpoint.objects.filter(pk=endpoint.pk).update(
        breaker_state=BreakerState.OPEN,
        open_until=now + timedelta(minutes=10),
        consecutive_failures=5,
        failing_since=now - timedelta(minutes=20),
    )
    event = Event.objects.create(
        event_type="order.paid",
        payload={"order_id": 42, "amount": "19.90", "currency": "EUR"},
        body='{"order_id":42,"amount":"19.90","currency":"EUR"}',
        msg_id="msg_2mKQ7dWkz1sVJb0x",
        idempotency_key="order-42-paid",
    )
    delivery = Delivery.objects.create(
        event=event,
        endpoint=endpoint,
        status=Status.DEAD,
        attempts=2,
        max_attempts=2,
        finished_at=now,
        last_error="HTTP 503 from receiver",
    )
    for n, code in ((1, 503), (2, 503)):
        DeliveryAttempt.objects.create(
            delivery=delivery,
            attempt=n,
            started_at=now - timedelta(seconds=60 - n),
            duration_ms=120 + n,
            status_code=code,
            response_headers={"content-type": "text/plain", "retry-after": "30"},
            response_body="Service Unavailable",
            worker_id="web-1:4242:a1b2",
        )
    return dead, delivery


def test_replay_a_dead_job_from_the_dlq_in_a_browser(
    chromium, live_server, run_worker, screenshots
):
    from django.contrib.auth.models import User
    from playwright.sync_api import expect, sync_playwright

    User.objects.create_superuser("admin", "admin@example.com", "demo-only-password")
    dead, delivery = _demo_rows()
    base = live_server.url

    with sync_playwright() as pw:
        browser, page = log_in(pw, chromium, base, 1400)

        page.click("#pgqueue-module a:has-text('Queue dashboard')")
        expect(page.locator("#pgq-queues")).to_contain_text("payments")
        expect(page.locator("#pgq-attention")).to_contain_text("hooks.example.com/orders")
        page.screenshot(path=str(screenshots / "admin-dashboard.png"), full_page=True)

        # The DLQ: the status filter's "Dead (DLQ)" choice.
        page.goto(f"{base}/admin/django_pgqueue/job/")
        page.click("#changelist-filter a:has-text('Dead (DLQ)')")
        expect(page).to_have_url(f"{base}/admin/django_pgqueue/job/?status=dead")
        row = page.locator("#result_list tbody tr", has_text=f"{dead.pk}")
        row.locator(f"a.pgq-action[href$='/replay/{dead.pk}/']").click()

        # The GET only showed a confirmation; the replay happens on this POST.
        expect(page.locator("#content-main")).to_contain_text("Back to pending")
        assert job_status(dead.pk) == Status.DEAD
        page.click("input[type=submit][value^='Yes']")
        expect(page.locator("ul.messagelist")).to_contain_text("Replayed: 1 job.")
        assert job_status(dead.pk) == Status.PENDING

        detail = f"{base}/admin/django_pgqueue/job/{dead.pk}/change/"
        page.goto(detail)
        expect(page.locator(".field-status_display .pgq-status")).to_have_text("Pending")
        page.screenshot(path=str(screenshots / "admin-job-detail.png"), full_page=True)

        run_worker(burst=True)
        page.reload()
        expect(page.locator(".field-status_display .pgq-status")).to_have_text("Succeeded")
        expect(page.locator(".field-result_json")).to_contain_text("5")

        page.goto(f"{base}/admin/django_pgqueue/delivery/{delivery.pk}/change/")
        expect(page.locator("#content-main")).to_contain_text("msg_2mKQ7dWkz1sVJb0x")
        page.screenshot(path=str(screenshots / "admin-delivery-detail.png"), full_page=True)
        browser.close()


@pytest.mark.parametrize("width", [1280, 1400])
def test_key_columns_and_buttons_fit_the_screen(chromium, live_server, width):
    """On a laptop screen the DLQ list shows "Last error" and every row's Replay
    button without scrolling sideways, our breadcrumbs are styled as Django's, and
    the index keeps "Recent actions" beside the app list."""
    from django.contrib.auth.models import User
    from playwright.sync_api import sync_playwright

    User.objects.create_superuser("admin", "admin@example.com", "demo-only-password")
    _demo_rows()
    Job.objects.create(
        task_path="testproject.demo.tasks.always_fails_with_a_rather_long_task_name",
        queue_name="a-queue-with-a-long-name",
        status=Status.DEAD,
        attempts=3,
        max_attempts=3,
        finished_at=timezone.now(),
        last_error="RuntimeError: " + "the receiving service answered with a long message " * 4,
    )
    base = live_server.url
    with sync_playwright() as pw:
        browser, page = log_in(pw, chromium, base, width)

        app_list = page.locator("#content-main").bounding_box()
        recent = page.locator("#recent-actions-module").bounding_box()
        assert app_list and recent and recent["y"] < app_list["y"] + 100, (app_list, recent)
        assert recent["x"] > app_list["x"] + app_list["width"] - 1, "beside, not below"

        page.goto(f"{base}/admin/django_pgqueue/job/?status=dead")
        widths = page.evaluate(
            "[...document.querySelectorAll('#result_list thead th')]"
            ".map(th => th.className + ':' + Math.round(th.getBoundingClientRect().width))"
        )
        header = page.locator("#result_list thead th.column-last_error_line").bounding_box()
        assert header and header["x"] + header["width"] <= width, (header, widths)
        buttons = page.locator("#result_list a.pgq-action:has-text('Replay')")
        assert buttons.count() >= 2
        for n in range(buttons.count()):
            box = buttons.nth(n).bounding_box()
            assert box and box["x"] + box["width"] <= width, (box, widths)
            assert box and box["x"] + box["width"] <= width, box
        scroll = page.evaluate("document.documentElement.scrollWidth")
        assert scroll <= width, f"the page scrolls sideways: {scroll} > {width}"

        page.goto(f"{base}/admin/django_pgqueue/job/dashboard/")
        crumbs = page.locator("nav[aria-label='Breadcrumbs'] ol.breadcrumbs")
        background = crumbs.evaluate("el => getComputedStyle(el).backgroundColor")
        assert background not in ("rgba(0, 0, 0, 0)", "transparent"), background
        browser.close()
