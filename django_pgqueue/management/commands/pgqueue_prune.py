"""``manage.py pgqueue_prune``: delete old terminal jobs and webhook deliveries in batches."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand

from django_pgqueue.conf import get_settings
from django_pgqueue.maintenance import DEFAULT_BATCH_SIZE, DEFAULT_DEAD_RETENTION, prune
from django_pgqueue.management.argtypes import non_negative_float, positive_int


def describe(seconds: float) -> str:
    days = seconds / 86400
    return f"{days:g} day(s)" if days >= 1 else f"{seconds:g} s"


class Command(BaseCommand):
    help = (
        "Delete succeeded/cancelled jobs and webhook deliveries older than "
        "PGQUEUE['RETENTION'], in short batches. Dead-lettered rows are kept unless "
        "a retention is configured for them or --include-dead is given."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )
        parser.add_argument(
            "--include-dead",
            action="store_true",
            help=(
                "Also prune the dead-letter queue: rows older than RETENTION['dead'], or "
                f"{describe(DEFAULT_DEAD_RETENTION)} when that is None."
            ),
        )
        parser.add_argument(
            "--dead-days",
            type=non_negative_float,
            default=None,
            help="Prune dead-lettered rows older than this many days (implies --include-dead).",
        )
        parser.add_argument(
            "--batch-size",
            type=positive_int,
            default=DEFAULT_BATCH_SIZE,
            help=f"Rows examined (at most deleted) per transaction (default {DEFAULT_BATCH_SIZE}).",
        )
        parser.add_argument(
            "--pause",
            type=non_negative_float,
            default=0.0,
            help="Seconds to sleep between batches (default 0).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        dead_days = options["dead_days"]
        report = prune(
            dry_run=options["dry_run"],
            include_dead=options["include_dead"] or dead_days is not None,
            dead_seconds=dead_days * 86400 if dead_days is not None else None,
            batch_size=options["batch_size"],
            pause=options["pause"],
            progress=(lambda line: self.stdout.write(line)) if options["verbosity"] > 1 else None,
        )
        verb = "Would delete" if report.dry_run else "Deleted"
        if report.partitions_made:
            self.stdout.write(f"Made {report.partitions_made} day partition(s) ahead.")
        if report.partitions_dropped:
            names = ", ".join(report.partitions_dropped)
            drop = "Would drop" if report.dry_run else "Dropped"
            self.stdout.write(f"{drop} {len(report.partitions_dropped)} partition(s): {names}.")
        if not report.retention:
            self.stdout.write("Nothing to prune: every state is kept (PGQUEUE['RETENTION']).")
            return
        kept = ", ".join(
            f"{state} older than {describe(age)}" for state, age in report.retention.items()
        )
        attempts = get_settings().ATTEMPT_RETENTION_SECONDS
        if attempts is not None:
            kept += f"; webhook attempts older than {describe(attempts)}"
        self.stdout.write(f"Retention: {kept}.")
        if "dead" not in report.retention:
            self.stdout.write("Dead-lettered rows are kept (use --include-dead to prune them).")
        if not report.deleted or not report.total():
            self.stdout.write(f"{verb} nothing.")
            return
        for table, per_state in report.deleted.items():
            parts = ", ".join(f"{count} {state}" for state, count in sorted(per_state.items()))
            self.stdout.write(f"{verb} from {table}: {parts}.")
