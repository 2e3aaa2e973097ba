"""Command-line validation of runworkers: bad values are named before anything runs."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "argument --concurrency: must be 1 or more, got 0"),
        (["--processes", "two"], "argument --processes: expected a whole number, got 'two'"),
        (["--lease", "0"], "argument --lease: must be above 0, got 0"),
        (["--poll-interval", "soon"], "expected a number of seconds, got 'soon'"),
        (["--prefetch", "-1"], "argument --prefetch: must be 0 or more, got -1"),
        (["--queues", ","], "comma-separated list of queue names"),
    ],
)
def test_bad_options_are_named(args, message):
    with pytest.raises(CommandError, match=message):
        call_command("runworkers", *args)


def test_worker_id_cannot_name_several_processes():
    with pytest.raises(CommandError, match="--worker-id names one process"):
        call_command("runworkers", "--processes", "2", "--worker-id", "w1")
