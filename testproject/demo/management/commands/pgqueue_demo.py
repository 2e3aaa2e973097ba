"""``manage.py pgqueue_demo``: enqueue a realistic mix of work, drain it with real workers,
and print what happened."""

from __future__ import annotations

import platform
import subprocess
import sys
import time
from datetime import timedelta
from typing import Any

import django
from django.core.management.base import BaseCommand
from django.db.models import Count, Q
from django.utils import timezone

from django_pgqueue import enqueue_many
from django_pgqueue.models import Job, Workflow, WorkflowEdge
from django_pgqueue.workflows import Batch, call, chord, get_workflow
from testproject.demo import tasks
from testproject.demo.models import TaskRun

UNFINISHED = ("waiting", "pending", "failed", "in_progress")


class Command(BaseCommand):
    help = "Run the django_pgqueue demo: enqueue jobs, drain them with workers, summarise."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--jobs", type=int, default=5000, help="Bulk no-op jobs to enqueue.")
        parser.add_argument("--processes", type=int, default=2, help="Worker processes.")
        parser.add_argument("--concurrency", type=int, default=8, help="Threads per process.")
        parser.add_argument("--timeout", type=float, default=120, help="Give up after seconds.")
        parser.add_argument("--keep", action="store_true", help="Keep jobs from earlier demo runs.")

    def handle(self, *args: Any, **opts: Any) -> None:
        out = self.stdout
        if not opts["keep"]:
            Job.objects.all().delete()
            Workflow.objects.all().delete()
            WorkflowEdge.objects.all().delete()
            TaskRun.objects.all().delete()
        started = time.monotonic()
        self._enqueue(opts["jobs"])
        total = Job.objects.count()
        out.write(f"Enqueued {total} jobs in {time.monotonic() - started:.2f}s")

        webhook_demo = _webhook_demo()
        webhook_state = webhook_demo.start(out) if webhook_demo else None

        drain_started = time.monotonic()
        self._drain(opts, out)
        drained_in = time.monotonic() - drain_started

        webhook_summary = webhook_demo.finish(webhook_state, out) if webhook_demo else None
        self._summary(total, drained_in, out)
        if webhook_summary:
            out.write(webhook_summary)
        out.write(
            "\nSee it in the admin: python3 scripts/dev.py serve  "
            "(then open http://127.0.0.1:8000/admin/, user admin / password admin)"
        )

    def _enqueue(self, bulk: int) -> None:
        # Bulk: thousands of small jobs in one statement.
        enqueue_many(tasks.noop, [((), {})] * bulk)
        # Realistic work on a named, higher-priority queue.
        for order_id in range(1, 101):
            tasks.send_receipt.enqueue(order_id)
        # Flaky work: fails once or twice, then succeeds on a retry.
        for order_id in range(1, 21):
            tasks.flaky_charge.enqueue(order_id, fail_times=1 + order_id % 2)
        # Poison: exhausts its attempts and lands in the dead-letter queue.
        tasks.always_fails.enqueue(13)
        # Deferred: not before two seconds from now.
        later = tasks.add.using(run_after=timezone.now() + timedelta(seconds=2))
        for i in range(10):
            later.enqueue(i, i)
        # Coroutine tasks run too.
        for i in range(10):
            tasks.async_ping.enqueue(i)
        # Atomic: each writes one TaskRun row in the transaction that claims and
        # completes it; the failing ones leave none behind (their writes roll back).
        for i in range(20):
            tasks.record_atomic.enqueue(label="atomic", fail=i % 10 == 9)
        # A workflow: three additions at once, then their sum once all three succeeded
        # (released by the completion of the last one), reading their results.
        self.workflow_id = (
            chord(
                [call(tasks.add, i, i) for i in range(1, 4)],
                call(tasks.add_parents, 100),
                name="demo-chord",
            )
            .enqueue()
            .id
        )
        # A batch: its callback runs once, when the last of its jobs ends, and sees
        # the counts (one job fails for good).
        batch = Batch("demo-batch", on_complete=call(tasks.record_batch_counts, "batch"))
        for i in range(4):
            batch.add(tasks.record_step, f"batch-{i}")
        batch.add(tasks.always_fails, 99)
        self.batch_id = batch.enqueue().id

    def _drain(self, opts: dict[str, Any], out: Any) -> None:
        """Run burst workers until every job is finished (retries included)."""
        deadline = time.monotonic() + opts["timeout"]
        rounds = 0
        while Job.objects.filter(status__in=UNFINISHED).exists():
            if time.monotonic() > deadline:
                out.write(self.style.ERROR("Timed out waiting for the queue to drain"))
                break
            if not Job.objects.filter(
                Q(status__in=("pending", "failed"), next_attempt_at__lte=timezone.now())
                | Q(status="in_progress")
            ).exists():
                time.sleep(0.2)  # only scheduled retries or deferred jobs are left
                continue
            rounds += 1
            # A failed round (e.g. a crashed worker) is simply followed by another.
            subprocess.run(
                [
                    sys.executable,
                    sys.argv[0],
                    "runworkers",
                    "--burst",
                    "--processes",
                    str(opts["processes"]),
                    "--concurrency",
                    str(opts["concurrency"]),
                ],
                check=False,
            )
        out.write(f"Workers ran {rounds} burst round(s) (retries and deferred jobs wait)")

    def _summary(self, total: int, seconds: float, out: Any) -> None:
        counts = dict(
            Job.objects.values_list("status").annotate(n=Count("id")).values_list("status", "n")
        )
        retried = Job.objects.filter(attempts__gt=1).count()
        out.write("\n=== Jobs ===")
        out.write(f"  succeeded : {counts.get('succeeded', 0)}")
        out.write(f"  retried   : {retried} (succeeded after a failure or still failing)")
        out.write(f"  dead (DLQ): {counts.get('dead', 0)}")
        unfinished = sum(counts.get(s, 0) for s in UNFINISHED)
        if unfinished:
            out.write(f"  unfinished: {unfinished}")
        out.write(
            f"  drained {total} jobs in {seconds:.2f}s = {total / seconds:,.0f} jobs/s "
            "(retry backoff and deferred jobs included)"
        )
        for line in _rate_explained():
            out.write(f"  {line}")
        workflow = get_workflow(self.workflow_id)
        batch = get_workflow(self.batch_id)
        out.write("\n=== Workflows and batches ===")
        if workflow is not None:
            out.write(
                f"  workflow #{workflow.id} {workflow.name}: {workflow.status}; "
                f"results {workflow.results()}"
            )
        if batch is not None:
            seen = TaskRun.objects.filter(label__startswith="batch:").values_list(
                "label", flat=True
            )
            out.write(
                f"  batch #{batch.id}: {batch.status}, on_complete ran {len(seen)} time(s) and saw "
                f"total/succeeded/failed/cancelled = {', '.join(s.split(':')[1] for s in seen)}"
            )
        atomic = Job.objects.filter(atomic=True)
        out.write("\n=== Atomic tasks (exactly-once database effects) ===")
        out.write(
            f"  succeeded : {atomic.filter(status='succeeded').count()}, "
            f"dead: {atomic.filter(status='dead').count()}; effect rows: "
            f"{TaskRun.objects.filter(label='atomic').count()} (one per succeeded job, "
            "none for the failed attempts)"
        )
        out.write("  Periodic tasks run in long-lived workers: see pgqueue_demo_server.")
        for job in Job.objects.filter(status="dead")[:3]:
            out.write(
                f"  DLQ: job {job.pk} {job.task_path} after {job.attempts} attempts: "
                f"{job.last_error}"
            )


def _rate_explained() -> list[str]:
    """Why the demo's rate is far below the README's benchmark figure, and which Django ran."""
    return [
        "This is the demo's wall time, not the engine's throughput: it includes starting",
        "worker processes for each burst round, the retries' backoff, the deferred jobs'",
        "2 s wait, and jobs that do work (send_receipt sleeps 10 ms) or fail on purpose.",
        "The README's 41,000 jobs/s is `pgqueue_bench`'s drain of no-op jobs by one",
        "worker already running, measured on its own (docs/performance.md).",
        f"Ran on Django {django.get_version()}, Python {platform.python_version()}: "
        "dev.py picks Django 6 on Python 3.12+",
        "(Django 6 needs it) and 5.2 LTS otherwise; `--python python3.12` runs Django 6.",
    ]


def _webhook_demo() -> Any:
    """The webhook part of the demo, when the webhook engine is installed."""
    try:
        from testproject.demo import webhook_demo
    except ImportError:
        return None
    return webhook_demo
