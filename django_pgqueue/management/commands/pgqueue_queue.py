"""``manage.py pgqueue_queue``: list, configure, reset, pause and resume job queues (flow
control).

A thin door onto ``django_pgqueue.queues``, which validates and writes. A name the
project does not use (no row, no live job, not in a backend's ``QUEUES``) is an
error unless ``--create`` is given, so a typo never makes a new, unused queue.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_pgqueue import queues
from django_pgqueue.management.argtypes import positive_int


class Command(BaseCommand):
    help = "List the job queues' limits and pauses, or configure, pause or resume a queue."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        actions.add_parser("list", help="The configured queues: limits, paused, running jobs.")
        configure = actions.add_parser(
            "configure", help="Set a queue's limits (each one not given is cleared)."
        )
        configure.add_argument("name")
        configure.add_argument("--concurrency", type=positive_int, default=None)
        configure.add_argument("--key-concurrency", type=positive_int, default=None)
        configure.add_argument("--rate-limit", type=positive_int, default=None)
        configure.add_argument(
            "--rate-period", type=positive_int, default=1, help="Seconds (default 1)."
        )
        configure.add_argument(
            "--key-rate-limit",
            type=positive_int,
            default=None,
            help="Most jobs started per key rate period per concurrency key.",
        )
        configure.add_argument(
            "--key-rate-period", type=positive_int, default=1, help="Seconds (default 1)."
        )
        actions.add_parser(
            "reset", help="Hand a queue's limits back to PGQUEUE['QUEUES'] (none if it has none)."
        ).add_argument("name")
        for action in ("pause", "resume"):
            sub = actions.add_parser(action, help=f"{action.capitalize()} a queue.")
            sub.add_argument("name")
        for sub in (configure, actions.choices["pause"]):
            sub.add_argument(
                "--create", action="store_true", help="Accept a queue no job uses yet."
            )

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "list":
            self._list()
            return
        name = options["name"]
        try:
            known = queues.is_known(name)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if not known and not options.get("create"):
            raise CommandError(
                f"Unknown queue {name!r}: it has no configuration, no live job and no "
                f"backend lists it in QUEUES. Check the name"
                + (
                    ", or pass --create to configure it anyway."
                    if action in ("configure", "pause")
                    else "."
                )
            )
        try:
            if action == "configure":
                queues.configure(
                    name,
                    concurrency=options["concurrency"],
                    key_concurrency=options["key_concurrency"],
                    rate_limit=options["rate_limit"],
                    rate_period=options["rate_period"],
                    key_rate_limit=options["key_rate_limit"],
                    key_rate_period=options["key_rate_period"],
                )
                self.stdout.write(f"queue {name!r} configured (wins over PGQUEUE['QUEUES'])")
            elif action == "reset":
                changed = queues.reset(name)
                self.stdout.write(
                    f"queue {name!r} "
                    + ("follows PGQUEUE['QUEUES'] again" if changed else "has no configuration")
                )
            elif action == "pause":
                queues.pause(name)
                self.stdout.write(f"queue {name!r} paused: workers take none of its jobs")
            else:
                changed = queues.resume(name)
                self.stdout.write(f"queue {name!r} " + ("resumed" if changed else "was not paused"))
        except ValueError as exc:
            raise CommandError(str(exc)) from None

    def _list(self) -> None:
        rows = queues.list_queues()
        if not rows:
            self.stdout.write("(no queue configured: every queue runs without limits)")
            return
        sources = {
            queues.SOURCE_RUN_TIME: "limits set at run time",
            queues.SOURCE_SETTINGS: "limits from settings",
        }
        for q in rows:
            rate = f"{q.rate_limit}/{q.rate_period}s" if q.rate_limit else "-"
            key_rate = f"{q.key_rate_limit}/{q.key_rate_period}s" if q.key_rate_limit else "-"
            state = f"paused since {q.paused_at.isoformat()}" if q.paused_at else "running"
            self.stdout.write(
                f"{q.name}  concurrency={q.concurrency or '-'}  "
                f"key_concurrency={q.key_concurrency or '-'}  rate={rate}  "
                f"key_rate={key_rate}  running={q.running}  {state}  "
                f"({sources.get(q.source, 'no limits')})"
            )
