"""Enqueue the chaos test's workflows and batches: ``workflow_producer.py COUNT``.

COUNT five-step workflows through the public API, one transaction each: even ones
are diamonds (a -> b, c -> d -> e), odd ones chains (a -> b -> c -> d -> e); steps
alternate between atomic (``record_step``, exactly-once effect) and ordinary
(``record_plain_step``) tasks, so both completions release. Every tenth workflow
comes with a batch of five jobs and ``on_success`` and ``on_complete`` callbacks.
Prints ``WF <id>`` and ``BATCH <id>`` after each commit.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

import django

django.setup()

from django_pgqueue.workflows import Batch, Workflow, call  # noqa: E402
from testproject.demo import tasks  # noqa: E402


def workflow(n: int) -> Workflow:
    wf = Workflow(f"chaos-{n}")
    kinds = [tasks.record_step, tasks.record_plain_step]

    def step(label: str, after: list) -> object:
        return wf.add(kinds[len(wf.steps) % 2], f"{n}{label}", after=after, step_name=label)

    a = step("a", [])
    if n % 2 == 0:
        b, c = step("b", [a]), step("c", [a])
        d = step("d", [b, c])
    else:
        b = step("b", [a])
        c = step("c", [b])
        d = step("d", [c])
    step("e", [d])
    return wf


def main(count: int) -> None:
    for n in range(count):
        print(f"WF {workflow(n).enqueue().id}", flush=True)
        if n % 10 == 0:
            batch = Batch(
                f"chaos-batch-{n}",
                on_success=call(tasks.record_batch_counts, "success"),
                on_complete=call(tasks.record_batch_counts, "complete"),
            )
            for i in range(5):
                batch.add(tasks.record_step, f"batch{n}-{i}")
            print(f"BATCH {batch.enqueue().id}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
