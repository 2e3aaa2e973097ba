"""``runworkers --until-empty``: a burst run that also waits for retries, bounded by --max-time."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from django_pgqueue.models import Job
from testproject.demo import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def test_burst_leaves_scheduled_retries_until_empty_finishes_them(worker_process):
    for n in range(3):
        tasks.flaky_charge.enqueue(n, fail_times=2)  # two retries each (0.25-2 s backoff)
    burst = worker_process("--burst", "--concurrency", "2")
    assert burst.wait(60) == 0
    assert Job.objects.filter(status="failed").exists()  # retries still scheduled

    drain = worker_process("--until-empty", "--max-time", "60", "--concurrency", "2")
    assert drain.wait(90) == 0, drain.output()
    assert set(Job.objects.values_list("status", flat=True)) == {"succeeded"}
    assert sorted(Job.objects.values_list("attempts", flat=True)) == [3, 3, 3]


def test_max_time_stops_with_exit_2_while_work_is_left(worker_process):
    later = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 1)
    tasks.add.enqueue(2, 2)
    drain = worker_process("--until-empty", "--max-time", "1.5")
    assert drain.wait(60) == 2
    assert "reached with work left" in drain.output()
    assert Job.objects.get(pk=int(later.id)).status == "pending"
    assert Job.objects.filter(status="succeeded").count() == 1


def test_until_empty_runs_one_process():
    with pytest.raises(CommandError, match="--until-empty and --max-time run one process"):
        call_command("runworkers", "--until-empty", "--processes", "2")
