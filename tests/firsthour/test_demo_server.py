"""``scripts/dev.py serve`` (``manage.py pgqueue_demo_server``): the admin it shows is
styled, although the demo runs with DEBUG off."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from ..conftest import REPO, database_url, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str) -> tuple[int, str] | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError:
        return None  # not listening yet


def test_the_demo_server_serves_the_admin_css():
    port = _free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")},
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
    }
    server = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "pgqueue_demo_server",
            "--no-seed",
            "--addr",
            f"127.0.0.1:{port}",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        css = f"http://127.0.0.1:{port}/static/admin/css/base.css"
        status, content_type = wait_for(lambda: _get(css), 60, "the demo server to answer")
        assert status == 200
        assert content_type.startswith("text/css")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
