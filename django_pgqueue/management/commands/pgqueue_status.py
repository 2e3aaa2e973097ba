"""``manage.py pgqueue_status``: queue depth, lag, dead letters, endpoints and workers."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_pgqueue.management.argtypes import non_negative_int
from django_pgqueue.status import (
    XMIN_WARNING_SECONDS,
    Thresholds,
    parse_duration,
    render_text,
    snapshot,
)

#: Exit status when a threshold is exceeded (Nagios' CRITICAL; 1 is a command error).
EXIT_THRESHOLD = 2


def duration(value: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class Command(BaseCommand):
    help = (
        "Show every queue (due, deferred, in progress, lapsed, oldest due age, dead), the "
        "webhook endpoints and the live workers; exit 2 when a threshold is exceeded."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="One JSON document.")
        parser.add_argument(
            "--watch",
            nargs="?",
            const=2.0,
            type=duration,
            default=None,
            metavar="INTERVAL",
            help="Refresh every INTERVAL (default 2s) until interrupted; with --json, one "
            "document per line.",
        )
        parser.add_argument(
            "--max-oldest-due",
            type=duration,
            default=None,
            help="Not ok when a due row has waited longer (e.g. 60s, 5m).",
        )
        parser.add_argument(
            "--max-dead",
            type=non_negative_int,
            default=None,
            help="Not ok above this many dead rows.",
        )
        parser.add_argument(
            "--max-lapsed",
            type=non_negative_int,
            default=None,
            help="Not ok above this many lapsed leases in a queue.",
        )
        parser.add_argument(
            "--min-workers",
            type=non_negative_int,
            default=None,
            help="Not ok below this many live workers.",
        )
        parser.add_argument(
            "--xmin-warning-age",
            type=duration,
            default=XMIN_WARNING_SECONDS,
            help="Warn about a session holding back the xmin horizon (vacuum) longer "
            f"than this (default {XMIN_WARNING_SECONDS:g}s).",
        )
        parser.add_argument(
            "--max-xmin-age",
            type=duration,
            default=None,
            help="Not ok when a session holds back the xmin horizon longer (e.g. 10m).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        limits = Thresholds(
            max_oldest_due=options["max_oldest_due"],
            max_dead=options["max_dead"],
            max_lapsed=options["max_lapsed"],
            min_workers=options["min_workers"],
            xmin_warning_age=min(
                options["xmin_warning_age"], options["max_xmin_age"] or float("inf")
            ),
            max_xmin_age=options["max_xmin_age"],
        )
        interval = options["watch"]
        if interval is not None and interval <= 0:
            raise CommandError("--watch needs an interval above 0")
        try:
            while True:
                data = snapshot(limits)
                if options["json"]:
                    self.stdout.write(json.dumps(data, separators=(",", ":")))
                else:
                    if interval is not None and self.stdout.isatty():
                        self.stdout.write("\x1b[2J\x1b[H", ending="")
                    self.stdout.write(render_text(data))
                if interval is None:
                    break
                self.stdout.flush()
                time.sleep(interval)
        except KeyboardInterrupt:
            return
        if not data["ok"]:
            if not options["json"]:
                self.stderr.write("; ".join(data["problems"]))
            sys.exit(EXIT_THRESHOLD)
