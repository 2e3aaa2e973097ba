"""``manage.py pgqueue_demo_server``: the admin on demo data, with workers running.

Creates a demo superuser (``admin`` / ``admin``, for this local demo only), queues
a few jobs (some succeed, one retries, one ends in the dead-letter queue), then
runs ``runserver`` and ``runworkers`` side by side until Ctrl-C, which stops both.
It applies no migrations itself (``scripts/dev.py serve`` does that first).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from django_pgqueue.conf import get_settings
from django_pgqueue.models import Job
from testproject.demo import tasks

DEMO_USER = "admin"
DEMO_PASSWORD = "admin"  # demo only: a local throwaway database


class Command(BaseCommand):
    help = "Run the admin (runserver) and workers (runworkers) on demo data; Ctrl-C stops both."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--addr", default="127.0.0.1:8000", help="runserver address.")
        parser.add_argument("--no-seed", action="store_true", help="Do not queue demo jobs.")

    def handle(self, *args: Any, **opts: Any) -> None:
        self._demo_user()
        if not opts["no_seed"]:
            self._seed()
        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        children = [
            # --insecure: the demo runs with DEBUG off (the settings of a deployed
            # project), where runserver would leave the admin without its CSS.
            subprocess.Popen(
                [*manage, "runserver", opts["addr"], "--noreload", "--insecure"],
                start_new_session=True,
            ),
            # The workers also run the demo's periodic tasks (testproject/demo/periodic.py).
            subprocess.Popen(
                [*manage, "runworkers"],
                start_new_session=True,
                env={**os.environ, "PGQUEUE_DEMO_SCHEDULE": "1"},
            ),
        ]
        url = f"http://{opts['addr']}/admin/"
        self.stdout.write(
            self.style.SUCCESS(
                f"\nAdmin: {url}  (user {DEMO_USER!r}, password {DEMO_PASSWORD!r}, demo only)"
            )
        )
        self.stdout.write(f"Queue dashboard: {url}django_pgqueue/job/dashboard/")
        delay = get_settings().HISTORY_DELAY_SECONDS
        if delay is None:
            self.stdout.write(f"Dead-letter queue: {url}django_pgqueue/job/?status=dead")
        else:
            # A dead job moves to the history HISTORY_DELAY_SECONDS after it died, and
            # the workers started here move the demo's at once: the DLQ is read there.
            self.stdout.write(
                f"Dead-letter queue: {url}django_pgqueue/jobhistory/?status=dead "
                f"(the last {delay:g} s: {url}django_pgqueue/job/?status=dead)"
            )
        self.stdout.write(
            f"Periodic tasks (next and last run, pause): {url}django_pgqueue/schedule/"
        )
        self.stdout.write("Ctrl-C stops the server and the workers.\n")
        # SIGTERM (e.g. from a process manager or `timeout`) stops them too.
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            while all(child.poll() is None for child in children):
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            self._stop(children)

    def _demo_user(self) -> None:
        users = get_user_model()
        if not users.objects.filter(username=DEMO_USER).exists():
            users.objects.create_superuser(DEMO_USER, "admin@example.com", DEMO_PASSWORD)
            self.stdout.write(f"Created the demo superuser {DEMO_USER!r} (demo only).")

    def _seed(self) -> None:
        if Job.objects.exists():
            return
        for order in range(1, 6):
            tasks.send_receipt.enqueue(order)
        tasks.flaky_charge.enqueue(7, fail_times=2)  # retries with backoff, then succeeds
        tasks.always_fails.enqueue(13)  # exhausts its attempts: the dead-letter queue
        self.stdout.write("Queued demo jobs (one will land in the dead-letter queue).")

    def _stop(self, children: list[subprocess.Popen]) -> None:
        # SIGTERM: runworkers drains its running tasks; runserver exits.
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        self.stdout.write("Stopped the server and the workers.")


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
