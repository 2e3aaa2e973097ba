"""The console's charts in a real Chromium at 1,280 and 1,440 px: drawn, inside the
viewport with the key columns and actions, and with no serious or critical
accessibility violation found by axe-core.

axe-core comes from npm into a cache directory (``AXE_CACHE``, default
``~/.cache/django-pgqueue/axe``) the first time; without npm or the network the
test skips loudly. ``PGQUEUE_UPDATE_SCREENSHOTS=1`` (``scripts/screenshots.sh``)
writes the screenshots docs/admin.md uses.
"""

# ruff: noqa: F811 - the fixtures imported from test_browser are parameters here
from __future__ import annotations

import os
import shutil
import subprocess
import warnings
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from django_pgqueue.rollup import histogram

from .test_browser import _demo_rows, chromium, log_in, screenshots  # noqa: F401 - fixtures

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

AXE_VERSION = "4.10.2"
AXE_CACHE = Path(os.environ.get("AXE_CACHE", Path.home() / ".cache" / "django-pgqueue" / "axe"))


@pytest.fixture(scope="module")
def axe_script() -> str:
    """The path of axe.min.js, installed with npm on first use."""
    script = AXE_CACHE / "node_modules" / "axe-core" / "axe.min.js"
    if not script.exists():
        npm = shutil.which("npm")
        reason = ""
        if npm is None:
            reason = "npm is not installed"
        else:
            AXE_CACHE.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "-s", f"axe-core@{AXE_VERSION}"],
                cwd=AXE_CACHE,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            if done.returncode != 0:
                reason = f"npm install axe-core failed: {done.stderr[-500:]}"
        if not script.exists():
            reason = f"ACCESSIBILITY TEST SKIPPED: no axe-core ({reason or 'not installed'})"
            warnings.warn(reason, pytest.PytestWarning, stacklevel=1)
            pytest.skip(reason)
    return str(script)


def _history() -> None:
    """An hour of rollup minutes for two queues, an endpoint and an application."""
    from django_pgqueue.models import Application, Endpoint, Rollup

    app = Application.objects.create(uid="cust_42", name="Customer 42")
    endpoint = Endpoint.objects.create(url="https://hooks.example.com/orders", application=app)
    now = timezone.now().replace(second=0, microsecond=0)
    rows = []
    for m in range(60):
        minute = now - timedelta(minutes=m)
        wave = (m * 7) % 23
        for name, scale in (("default", 40), ("emails", 12)):
            wait = [0] * histogram.SIZE
            run = [0] * histogram.SIZE
            wait[3 + wave % 6] = scale
            run[5 + wave % 4] = scale
            rows.append(
                Rollup(
                    kind="queue",
                    name=name,
                    minute=minute,
                    ok=scale + wave,
                    failed=wave % 3,
                    retried=wave % 5,
                    wait_hist=wait,
                    run_hist=run,
                    depth=scale * 3 + wave,
                )
            )
        run = [0] * histogram.SIZE
        run[7 + wave % 3] = 10
        for kind, name in (("endpoint", str(endpoint.id)), ("application", "cust_42")):
            rows.append(
                Rollup(
                    kind=kind,
                    name=name,
                    minute=minute,
                    ok=10,
                    failed=wave % 2,
                    retried=wave % 4,
                    run_hist=run,
                )
            )
    Rollup.objects.bulk_create(rows)


@pytest.fixture
def message_queue_minutes(live_server):
    """Two message queues, sampled by the maintenance thread's sampler a minute apart
    with sends, deletes and archives in between (tests/mq/test_charts.py), dropped
    afterwards: a queue's own tables outlive the test database's flush."""
    from django_pgqueue import mq
    from django_pgqueue.mq import store
    from django_pgqueue.mq.wakeup import listener

    _sample_two_queues()
    yield
    for name in ("orders", "emails"):
        mq.drop(name)
    store._cache.clear()
    listener.close()


def _sample_two_queues() -> None:
    from django.db import connection

    from django_pgqueue import mq
    from django_pgqueue.db import connect
    from django_pgqueue.rollup import store as rollup_store

    mq.create("orders")
    mq.create("emails")
    with connect("maintenance") as conn:
        minute = conn.execute("SELECT date_trunc('minute', now())").fetchone()[0]
        rollup_store.sample_message_queues(conn, minute - timedelta(minutes=1))
        ids = mq.send_batch("orders", [{"n": n} for n in range(6)])
        mq.delete("orders", ids[:2])
        mq.archive("orders", ids[2])
        mq.send("emails", {"to": "a@example.com"})
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_force_next_flush()")
        rollup_store.sample_message_queues(conn, minute)


@pytest.mark.parametrize("width", [1280, 1440])
def test_the_dashboard_charts_fit_and_pass_axe(
    chromium,
    live_server,
    width,
    axe_script,
    screenshots,
    message_queue_minutes,
):
    from django.contrib.auth.models import User
    from playwright.sync_api import expect, sync_playwright

    User.objects.create_superuser("admin", "admin@example.com", "demo-only-password")
    _demo_rows()
    _history()
    base = live_server.url
    with sync_playwright() as pw:
        browser, page = log_in(pw, chromium, base, width)
        page.goto(f"{base}/admin/django_pgqueue/job/dashboard/")
        charts = page.locator("#pgq-charts svg.pgq-chart")
        expect(charts).to_have_count(5)
        expect(page.locator("#pgq-delivery-charts svg.pgq-chart")).to_have_count(6)
        mq_charts = page.locator("#pgq-mq-charts svg.pgq-chart")
        expect(mq_charts).to_have_count(4)
        for chart in (charts, mq_charts):
            for n in range(chart.count()):
                box = chart.nth(n).bounding_box()
                assert box and box["x"] >= 0 and box["x"] + box["width"] <= width, (n, box)
        for selector in (
            "#pgq-queues thead th:last-child",
            "#pgq-charts .pgq-windows a",
            "#pgq-delivery-charts button[type=submit]",
        ):
            box = page.locator(selector).first.bounding_box()
            assert box and box["x"] + box["width"] <= width, (selector, box)
        scroll = page.evaluate("document.documentElement.scrollWidth")
        assert scroll <= width, f"the dashboard scrolls sideways: {scroll} > {width}"
        if width == 1440:
            page.screenshot(path=str(screenshots / "admin-dashboard.png"), full_page=True)
            page.locator("#pgq-charts").screenshot(path=str(screenshots / "admin-charts.png"))
            page.locator("#pgq-mq-charts").screenshot(path=str(screenshots / "admin-mq-charts.png"))

        page.add_script_tag(path=axe_script)
        result = page.evaluate(
            "axe.run(document, {resultTypes: ['violations']})"
            ".then(r => r.violations.map(v => [v.id, v.impact, v.nodes.length,"
            " v.nodes.slice(0, 3).map(n => n.target.join(' '))]))"
        )
        serious = [v for v in result if v[1] in ("serious", "critical")]
        assert not serious, serious
        browser.close()
