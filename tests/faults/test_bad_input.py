"""Bad input at enqueue and in stored rows: a clear error or a recorded failed attempt,
never a half-written row (catalogue S2, job side; webhook inputs are covered by
tests/webhooks/test_ssrf.py and test_engine.py).
"""

from __future__ import annotations

import decimal

import pytest
from django.contrib.auth.models import Group
from django.db import transaction

from django_pgqueue import enqueue_many
from django_pgqueue.exceptions import ArgumentsNotJSON, PayloadTooLarge

pytestmark = [pytest.mark.fault, pytest.mark.timeout(60), pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize(
    "value",
    [
        b"raw bytes",
        {1, 2},
        decimal.Decimal("1.5"),
        float("nan"),
        float("inf"),
        {(2, 3): "tuple key"},
        object(),
    ],
)
def test_non_json_arguments_are_refused_and_write_nothing(value):
    from django_pgqueue.models import Job
    from testproject.demo import tasks

    with pytest.raises(ArgumentsNotJSON, match="positional argument 0 is not JSON"):
        tasks.add.enqueue(value, 1)
    with pytest.raises(ArgumentsNotJSON, match="keyword argument 'b' is not JSON"):
        tasks.add.enqueue(1, b=value)
    assert Job.objects.count() == 0


def test_model_instance_argument_names_the_fix():
    from django_pgqueue.models import Job
    from testproject.demo import tasks

    group = Group.objects.create(name="g")
    with pytest.raises(ArgumentsNotJSON, match="an id instead of a model instance"):
        tasks.add.enqueue(group, 1)
    assert Job.objects.count() == 0


def test_oversized_arguments_are_refused(settings):
    from django_pgqueue.models import Job
    from testproject.demo import tasks

    settings.PGQUEUE = {**settings.PGQUEUE, "MAX_ARGS_BYTES": 1000}
    with pytest.raises(PayloadTooLarge, match="MAX_ARGS_BYTES"):
        tasks.record_run.enqueue("x" * 2000)
    assert Job.objects.count() == 0


def test_bulk_enqueue_is_all_or_nothing():
    from django_pgqueue.models import Job
    from testproject.demo import tasks

    good = [((i, i), {}) for i in range(3000)]  # large enough for the COPY path
    with pytest.raises(TypeError):
        enqueue_many(tasks.add, [*good, ((b"bad", 1), {})])
    assert Job.objects.count() == 0
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_many(tasks.add, good)
        raise RuntimeError("caller rolled back")
    assert Job.objects.count() == 0


def test_stored_arguments_that_do_not_fit_the_task_are_a_recorded_failure(run_worker):
    """A row written by older code (or by hand) with arguments the task rejects."""
    from django_pgqueue.models import Job

    job = Job.objects.create(
        task_path="testproject.demo.tasks.add", args=["only-one"], max_attempts=1
    )
    run_worker()
    job.refresh_from_db()
    assert job.status == "dead" and job.attempts == 1
    assert job.errors[0]["exception_class_path"] == "builtins.TypeError"
    assert "TypeError" in job.last_error


def test_stored_task_path_that_is_not_a_task_is_dead_not_run(run_worker):
    from django_pgqueue.models import Job

    bad = Job.objects.create(task_path="os.system", args=["echo pwned"], max_attempts=3)
    run_worker()
    bad.refresh_from_db()
    assert bad.status == "dead" and "not a Task" in bad.last_error
