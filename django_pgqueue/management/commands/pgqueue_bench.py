"""``manage.py pgqueue_bench``: throughput, latency and cost of the queue next to raw SQL."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_pgqueue.bench.core import WORKLOADS, Bench
from django_pgqueue.bench.guard import WrongDatabase
from django_pgqueue.management.argtypes import positive_float, positive_int


def workload_list(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = sorted(set(names) - set(WORKLOADS))
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of {', '.join(WORKLOADS)}"
        )
    return names


def int_list(value: str) -> list[int]:
    try:
        numbers = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 1,4,16, got {value!r}") from None
    if not numbers or min(numbers) < 1:
        raise argparse.ArgumentTypeError(f"expected positive numbers, got {value!r}")
    return numbers


class Command(BaseCommand):
    help = (
        "Benchmark enqueue, drain, wake-up latency, webhooks, claim cost, NOTIFY "
        "coalescing, message queues (beside pgmq) and the HTTP API's ingest against raw "
        "SQL (or a bare Django view), in a scratch database (<name>_bench)."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--only",
            type=workload_list,
            default=None,
            help=f"Workloads to run (default: all): {', '.join(WORKLOADS)}.",
        )
        parser.add_argument(
            "--repeat", type=positive_int, default=3, help="Repetitions (default 3)."
        )
        parser.add_argument(
            "--json",
            dest="json_path",
            default=None,
            help="Also write the results as JSON to this file.",
        )
        parser.add_argument(
            "--keep", action="store_true", help="Keep the scratch database at the end."
        )
        parser.add_argument(
            "--n-single",
            type=positive_int,
            default=2000,
            help="Jobs enqueued one per commit (default 2000).",
        )
        parser.add_argument(
            "--n-many",
            type=positive_int,
            default=10_000,
            help="Jobs in one enqueue_many (default 10000).",
        )
        parser.add_argument(
            "--n-drain",
            type=positive_int,
            default=20_000,
            help="No-op jobs per drain (default 20000).",
        )
        parser.add_argument(
            "--concurrency",
            type=int_list,
            default=[1, 4, 16],
            help="Thread counts tried for the 1-process drain (default 1,4,16).",
        )
        parser.add_argument(
            "--probes",
            type=positive_int,
            default=100,
            help="Latency probes per run (default 100, 100 ms apart).",
        )
        parser.add_argument(
            "--pickup-rate",
            type=positive_float,
            default=600.0,
            help="Jobs per second offered by the steady-rate pickup workload (default 600).",
        )
        parser.add_argument(
            "--pickup-seconds",
            type=positive_float,
            default=5.0,
            help="How long the steady-rate pickup workload offers jobs (default 5).",
        )
        parser.add_argument(
            "--pgmq-sql",
            default=None,
            metavar="PATH",
            help="pgmq's SQL-only install file: the pickup workload then also measures "
            "pgmq in the same shape, installed in the scratch database.",
        )
        parser.add_argument(
            "--pgmq-poll-ms",
            type=positive_int,
            default=10,
            help="The poll interval of pgmq's read_with_poll consumer (default 10).",
        )
        parser.add_argument(
            "--history",
            type=positive_int,
            default=1_000_000,
            help="Finished rows for the claim-cost workload (default 1000000).",
        )
        parser.add_argument(
            "--claims",
            type=positive_int,
            default=50,
            help="Claims timed per claim-cost run (default 50).",
        )
        parser.add_argument(
            "--producers",
            type=positive_int,
            default=8,
            help="Concurrent producers for the NOTIFY workload (default 8).",
        )
        parser.add_argument(
            "--n-notify",
            type=positive_int,
            default=4000,
            help="Jobs enqueued per NOTIFY run (default 4000).",
        )
        parser.add_argument(
            "--n-webhooks",
            type=positive_int,
            default=2000,
            help="Deliveries per webhook run (default 2000).",
        )
        parser.add_argument(
            "--fair-events",
            type=positive_int,
            default=10,
            help="Events per healthy endpoint in the many-endpoints-one-slow run (default 10).",
        )
        parser.add_argument(
            "--applications",
            type=positive_int,
            default=100_000,
            help="Applications (3 endpoints each) of the tenant fan-out run (default 100000).",
        )
        parser.add_argument(
            "--n-ingest",
            type=positive_int,
            default=2000,
            help="Events posted per ingest run, over all clients (default 2000).",
        )
        parser.add_argument(
            "--ingest-clients",
            type=int_list,
            default=[8, 32],
            help="Concurrent keep-alive clients tried by the ingest workload (default 8,32).",
        )
        parser.add_argument(
            "--ingest-workers",
            type=positive_int,
            default=4,
            help="gunicorn worker processes serving the ingest workload (default 4).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        pgmq_sql = options["pgmq_sql"]
        if pgmq_sql is not None and not os.path.isfile(pgmq_sql):
            raise CommandError(f"--pgmq-sql: no such file: {pgmq_sql}")
        if pgmq_sql is not None and "pickup" not in (options["only"] or WORKLOADS):
            raise CommandError("--pgmq-sql is measured by the pickup workload: add it to --only")
        bench = Bench(
            only=options["only"],
            repeat=options["repeat"],
            n_single=options["n_single"],
            n_many=options["n_many"],
            n_drain=options["n_drain"],
            drain_concurrency=options["concurrency"],
            latency_probes=options["probes"],
            pickup_rate=options["pickup_rate"],
            pickup_seconds=options["pickup_seconds"],
            pgmq_sql=options["pgmq_sql"],
            pgmq_poll_ms=options["pgmq_poll_ms"],
            history_rows=options["history"],
            claim_samples=options["claims"],
            producers=options["producers"],
            n_notify=options["n_notify"],
            n_webhooks=options["n_webhooks"],
            fair_events=options["fair_events"],
            applications=options["applications"],
            n_ingest=options["n_ingest"],
            ingest_clients=options["ingest_clients"],
            ingest_workers=options["ingest_workers"],
            keep=options["keep"],
            out=self.stdout.write,
        )
        try:
            bench.run()
        except WrongDatabase as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write("")
        self.stdout.write(bench.table())
        if options["json_path"]:
            with open(options["json_path"], "w") as fh:
                json.dump(bench.as_json(), fh, indent=2)
            self.stdout.write(f"\nJSON written to {options['json_path']}")
