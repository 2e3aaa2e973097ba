"""``manage.py runworkers``: parse options, then run a Worker (or a Supervisor)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from django_pgqueue.conf import get_settings
from django_pgqueue.logs import configure_worker_logging
from django_pgqueue.management.argtypes import (
    non_negative_int,
    positive_float,
    positive_int,
)
from django_pgqueue.worker import Worker
from django_pgqueue.worker.selection import check_queue_selection, unseen_queue_warnings
from django_pgqueue.worker.supervisor import (
    SUPERVISOR_PID_ENV,
    Supervisor,
    child_argv,
    die_with_parent,
)

APP_LABEL = "django_pgqueue"
#: The app's first migration starts so (the one that creates its tables).
FIRST_MIGRATION = "0001_"


def unapplied_migrations(alias: str) -> list[str]:
    """Names of django_pgqueue's migrations not applied on ``alias``, in order.

    Raises the driver's error when the database cannot be reached."""
    from django.db import connections
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connections[alias])
    leaves = [node for node in executor.loader.graph.leaf_nodes() if node[0] == APP_LABEL]
    plan = executor.migration_plan(leaves)
    return [migration.name for migration, _ in plan if migration.app_label == APP_LABEL]


def require_migrations(alias: str) -> None:
    """Refuse to start on a database that lacks this code's tables or columns: every
    claim would fail with "relation ... does not exist" and be retried for ever.

    A database that cannot be reached is left to the worker, which waits for it."""
    from django.db import DatabaseError, connections

    try:
        missing = unapplied_migrations(alias)
    except DatabaseError:
        return
    finally:
        connections[alias].close()
    if not missing:
        return
    name = connections[alias].settings_dict.get("NAME")
    listed = missing[0] if len(missing) == 1 else f"{missing[0]} ... {missing[-1]}"
    if missing[0].startswith(FIRST_MIGRATION):
        problem = "lacks django_pgqueue's tables: its migrations are not applied"
    else:
        problem = "lacks django_pgqueue migrations this version needs"
    raise CommandError(
        f"The database {alias!r} ({name}) {problem} ({listed}, {len(missing)} in all). "
        "Run `python manage.py migrate` first."
    )


def queue_list(value: str) -> list[str]:
    queues = [q.strip() for q in value.split(",") if q.strip()]
    if not queues:
        raise argparse.ArgumentTypeError("expected a comma-separated list of queue names")
    return queues


class Command(BaseCommand):
    help = "Run django_pgqueue workers: claim, run and complete jobs and webhook deliveries."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--queues", type=queue_list, default=None, help="Comma-separated queues (default: all)."
        )
        parser.add_argument(
            "--concurrency", type=positive_int, default=None, help="Task threads per process."
        )
        parser.add_argument(
            "--processes",
            type=positive_int,
            default=1,
            help="Worker processes; a supervisor restarts any that crash.",
        )
        parser.add_argument(
            "--prefetch",
            type=non_negative_int,
            default=None,
            help="Rows held beyond running tasks (default: adaptive).",
        )
        parser.add_argument(
            "--batch-size", type=positive_int, default=None, help="Most rows per claim statement."
        )
        parser.add_argument(
            "--lease", type=positive_float, default=None, help="Lease length in seconds."
        )
        parser.add_argument(
            "--poll-interval", type=positive_float, default=None, help="Seconds between polls."
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Exit 0 once nothing is due and nothing is in flight.",
        )
        parser.add_argument(
            "--until-empty",
            action="store_true",
            help="A burst run that also waits for scheduled retries and deferred jobs: exit 0 "
            "once nothing is pending, failed-and-retrying or in progress in the selected queues.",
        )
        parser.add_argument(
            "--max-time",
            type=positive_float,
            default=None,
            help="Stop after this many seconds; exit 2 if work was left (for CI).",
        )
        parser.add_argument(
            "--max-tasks", type=positive_int, default=None, help="Exit after claiming this many."
        )
        parser.add_argument("--worker-id", default=None, help="Name in logs and in the admin.")
        parser.add_argument(
            "--no-notify", action="store_true", help="Poll only (no LISTEN connection)."
        )
        parser.add_argument(
            "--no-scheduler",
            action="store_true",
            help="Do not enqueue periodic tasks from this process (default: every worker does).",
        )
        parser.add_argument(
            "--log-format",
            choices=["text", "json"],
            default=None,
            help="Log to stderr in this format (default: text, unless LOGGING handles "
            "django_pgqueue); -v sets the level: 0 errors, 1 attempts, 2 debug.",
        )
        parser.add_argument(
            "--metrics-port",
            type=positive_int,
            default=None,
            help="Serve Prometheus metrics on this port (child k of --processes: port + k); "
            "needs the [metrics] extra.",
        )
        parser.add_argument(
            "--metrics-addr",
            default="127.0.0.1",
            help="Address the metrics port listens on (default: this host only; 0.0.0.0 "
            "for every interface).",
        )
        parser.add_argument(
            "--reload",
            action="store_true",
            help="Restart when Python code changes (development; Django's autoreloader).",
        )
        # Set by a --processes parent on each child: the child then leaves the queue
        # selection warnings to its parent, may recycle itself (recycle_overdue) and
        # serves its metrics on the port plus its slot.
        parser.add_argument("--worker-slot", type=int, default=None, help=argparse.SUPPRESS)

    def handle(self, *args: Any, **options: Any) -> None:
        configure_worker_logging(options["verbosity"], options["log_format"])
        self._check_combinations(options)
        try:
            warnings = check_queue_selection(options["queues"])
            if options["worker_slot"] is None:
                warnings += unseen_queue_warnings(options["queues"])
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        if options["worker_slot"] is None:  # children of --processes: the parent did it
            require_migrations(get_settings().DATABASE)
            for warning in warnings:
                logging.getLogger("django_pgqueue.worker").warning(warning)
        if options["reload"]:
            from django_pgqueue.worker.reloading import run_with_reload

            run_with_reload(lambda: self._worker(options))
            return
        if options["processes"] > 1:
            code = Supervisor(child_argv(sys.argv), options["processes"]).run()
        else:
            worker = self._worker(options)
            code = worker.run()
        if code:
            sys.exit(code)

    @staticmethod
    def _check_combinations(options: dict[str, Any]) -> None:
        """Refuse options that cannot go together, before anything reads the database."""
        if options["processes"] <= 1:
            return
        if options["reload"]:
            raise CommandError("--reload runs one worker process; drop --processes")
        if options["until_empty"] or options["max_time"]:
            raise CommandError(
                "--until-empty and --max-time run one process; drop --processes "
                "(use --concurrency for more threads)"
            )
        if options["worker_id"]:
            raise CommandError("--worker-id names one process; it cannot go with --processes")

    def _worker(self, options: dict[str, Any]) -> Worker:
        """The Worker the options describe, its metrics served if asked."""
        parent_pid = None
        if options["worker_slot"] is not None and os.environ.get(SUPERVISOR_PID_ENV):
            parent_pid = int(os.environ[SUPERVISOR_PID_ENV])
            die_with_parent(parent_pid)  # else the worker's parent watch notices
        worker = Worker(
            queues=options["queues"],
            concurrency=options["concurrency"],
            prefetch=options["prefetch"],
            batch_size=options["batch_size"],
            lease_seconds=options["lease"],
            poll_interval=options["poll_interval"],
            burst=options["burst"],
            max_tasks=options["max_tasks"],
            worker_id=options["worker_id"],
            notify=False if options["no_notify"] else None,
            scheduler=False if options["no_scheduler"] else None,
            until_empty=options["until_empty"],
            max_time=options["max_time"],
            recycle_overdue=options["worker_slot"] is not None,
            parent_pid=parent_pid,
        )
        if options["metrics_port"] is not None:
            self._serve_metrics(worker, options)
        return worker

    @staticmethod
    def _serve_metrics(worker: Worker, options: dict[str, Any]) -> None:
        from django_pgqueue import metrics

        try:
            metrics.enable(
                worker,
                options["metrics_port"],
                slot=options["worker_slot"],
                addr=options["metrics_addr"],
            )
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        except OSError as exc:
            raise CommandError(f"--metrics-port {options['metrics_port']}: {exc}") from None
