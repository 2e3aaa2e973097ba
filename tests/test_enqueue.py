"""Enqueue through Django's Tasks API: transactions, validation, results, bulk."""

from __future__ import annotations

import datetime as dt
import decimal
import re

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_pgqueue import enqueue_many
from django_pgqueue.backend import PgQueueBackend, PgQueueTask
from django_pgqueue.compat import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task,
    task_enqueued,
)
from django_pgqueue.exceptions import ArgumentsNotJSON, PayloadTooLarge
from django_pgqueue.jobs.store import COPY_THRESHOLD
from django_pgqueue.models import Job
from testproject.demo import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def test_backend_flags_and_task_class():
    backend = tasks.add.get_backend()
    assert isinstance(backend, PgQueueBackend)
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority
    assert isinstance(tasks.add, PgQueueTask)
    assert tasks.flaky_charge.max_attempts == 4


def test_enqueue_writes_a_ready_row():
    result = tasks.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    job = Job.objects.get(pk=int(result.id))
    assert job.status == "pending"
    assert (job.args, job.kwargs) == ([2, 3], {})
    assert job.task_path == "testproject.demo.tasks.add"
    assert job.max_attempts == 5  # TASKS OPTIONS MAX_ATTEMPTS
    assert job.attempts == 0 and job.locked_by is None
    assert result.enqueued_at == job.created_at


def test_enqueue_commits_and_rolls_back_with_the_caller():
    with transaction.atomic():
        kept = tasks.add.enqueue(1, 1)
    with pytest.raises(RuntimeError), transaction.atomic():
        lost = tasks.add.enqueue(2, 2)
        assert Job.objects.filter(pk=int(lost.id)).exists()  # visible inside
        raise RuntimeError("boom")
    assert Job.objects.filter(pk=int(kept.id)).exists()
    assert not Job.objects.filter(pk=int(lost.id)).exists()


def test_non_json_argument_is_named_and_nothing_written():
    before = Job.objects.count()
    with pytest.raises(ArgumentsNotJSON, match=r"positional argument 1 .*Decimal"):
        tasks.add.enqueue(1, decimal.Decimal("1.5"))
    with pytest.raises(ArgumentsNotJSON, match=r"keyword argument 'when' .*datetime"):
        tasks.add.enqueue(a=1, when=timezone.now())
    with pytest.raises(ArgumentsNotJSON, match=r"NaN|nan|Out of range"):
        tasks.add.enqueue(float("nan"), 1)
    with pytest.raises(ArgumentsNotJSON, match="set"):
        tasks.add.enqueue({1, 2}, 1)
    assert Job.objects.count() == before


def test_oversized_arguments_are_refused(settings):
    settings.PGQUEUE = {**settings.PGQUEUE, "MAX_ARGS_BYTES": 1000}
    with pytest.raises(PayloadTooLarge, match="MAX_ARGS_BYTES"):
        tasks.add.enqueue("x" * 2000, 1)
    assert not Job.objects.exists()


def test_invalid_tasks_are_refused():
    with pytest.raises(InvalidTask, match="priority"):
        tasks.add.using(priority=1000)
    with pytest.raises(InvalidTask, match="max_attempts"):
        task(max_attempts=0)(tasks.add.func)
    with pytest.raises(InvalidTask, match="backoff"):
        task(backoff="soon")(tasks.add.func)

    def inner():  # not at module level
        return 1

    with pytest.raises(InvalidTask):
        task()(inner)


def test_get_result_and_unknown_id():
    result = tasks.add.enqueue(4, 5)
    fetched = tasks.add.get_result(result.id)
    assert fetched.id == result.id
    assert fetched.status == TaskResultStatus.READY
    assert fetched.args == [4, 5]
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result("999999999")
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result("not-an-id")


def test_status_mapping_of_every_state():
    result = tasks.add.enqueue(1, 2)
    expected = {
        "pending": TaskResultStatus.READY,
        "failed": TaskResultStatus.READY,
        "succeeded": TaskResultStatus.SUCCESSFUL,
        "dead": TaskResultStatus.FAILED,
        "cancelled": TaskResultStatus.FAILED,
    }
    for status, framework_status in expected.items():
        Job.objects.filter(pk=int(result.id)).update(
            status=status, finished_at=timezone.now(), result=3
        )
        assert tasks.add.get_result(result.id).status == framework_status


def test_defer_with_run_after():
    when = timezone.now() + dt.timedelta(minutes=5)
    result = tasks.add.using(run_after=when).enqueue(1, 1)
    job = Job.objects.get(pk=int(result.id))
    assert job.next_attempt_at == when


def test_priority_and_queue_are_stored():
    result = tasks.send_receipt.using(priority=-5).enqueue(1)
    job = Job.objects.get(pk=int(result.id))
    assert (job.queue_name, job.priority) == ("emails", -5)
    assert tasks.send_receipt.get_result(result.id).task.priority == -5


def test_task_enqueued_signal():
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append(task_result.id)

    task_enqueued.connect(receiver)
    try:
        result = tasks.add.enqueue(1, 1)
    finally:
        task_enqueued.disconnect(receiver)
    assert seen == [result.id]


@pytest.mark.parametrize("count", [3, 2500])
def test_task_enqueued_signal_for_every_job_of_a_bulk_enqueue(count):
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append(task_result.id)

    results = enqueue_many(tasks.add, [((1, 1), {})] * count)  # no receiver of ours
    task_enqueued.connect(receiver)
    try:
        results = enqueue_many(tasks.add, [((1, 1), {})] * count)
    finally:
        task_enqueued.disconnect(receiver)
    assert seen == [r.id for r in results]


def test_enqueue_is_one_insert():
    from django.db import connection

    with CaptureQueriesContext(connection) as ctx:
        tasks.add.enqueue(1, 2)
    assert len(ctx.captured_queries) == 1


@pytest.mark.parametrize("count", [3, 2500])  # INSERT path and COPY path
def test_enqueue_many_returns_results_in_order(count):
    items = [((i, i), {}) for i in range(count)]
    results = enqueue_many(tasks.add, items)
    assert len(results) == count
    jobs = {j.pk: j for j in Job.objects.filter(pk__in=[int(r.id) for r in results])}
    for i, result in enumerate(results):
        assert jobs[int(result.id)].args == [i, i]
        assert result.status == TaskResultStatus.READY


def test_every_enqueue_path_writes_the_same_new_row():
    """enqueue(), enqueue_many's INSERT and its COPY write a new job's columns from one
    list (sql.NEW_JOB_COLUMNS): a column out of place in any of them shows here."""
    from django_pgqueue.sql import NEW_JOB_COLUMNS

    columns = [column for column, _, _ in NEW_JOB_COLUMNS]
    times = ("created_at", "updated_at", "next_attempt_at")

    def rows(ids: list[int]) -> list[dict]:
        found = list(Job.objects.filter(pk__in=ids).values(*columns))
        assert len(found) == len(ids)
        for row in found:
            assert len({row.pop(column) for column in times}) == 1  # the enqueue's now()
        return found

    task = tasks.add.using(priority=7, queue_name="emails")
    (expected,) = rows([int(task.enqueue(1, 2).id)])
    assert expected == {
        "status": "pending",
        "priority": 7,
        "attempts": 0,
        "max_attempts": expected["max_attempts"],
        "worker_id": "",
        "last_error": "",
        "errors": [],
        "task_path": tasks.add.module_path,
        "queue_name": "emails",
        "flow_controlled": False,  # "emails" has no row (tests/test_flow_marks.py)
        "backend": "default",
        "args": [1, 2],
        "kwargs": {},
        "worker_ids": [],
    }
    for count in (3, COPY_THRESHOLD):  # the INSERT path, the COPY path
        ids = [int(r.id) for r in enqueue_many(task, [((1, 2), {})] * count)]
        assert all(row == expected for row in rows(ids))


def test_enqueue_many_is_all_or_nothing():
    with pytest.raises(ArgumentsNotJSON, match="positional argument 0"):
        enqueue_many(tasks.add, [((1, 2), {}), ((object(), 2), {})])
    assert not Job.objects.exists()
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_many(tasks.add, [((1, 2), {})] * 10)
        raise RuntimeError
    assert not Job.objects.exists()


@pytest.mark.parametrize("count", [3, 2500])  # INSERT path and COPY path
def test_enqueue_many_of_one_call_repeated_stores_each_row_and_independent_results(count):
    args = ('back\\slash\ttab\nnewline "quoted" é', [1, {"k": None}])
    kwargs = {"b": "\\N"}
    results = enqueue_many(tasks.add, [(args, kwargs)] * count)
    ids = [int(r.id) for r in results]
    assert ids == sorted(ids) and len(set(ids)) == count  # FIFO within the batch
    stored = list(Job.objects.filter(pk__in=ids).values_list("args", "kwargs").distinct())
    assert stored == [([args[0], [1, {"k": None}]], {"b": "\\N"})]
    assert all(r.args == [args[0], [1, {"k": None}]] and r.kwargs == kwargs for r in results)
    results[0].args[1][1]["k"] = "changed"
    results[0].kwargs["b"] = "changed"
    results[0].errors.append("x")
    assert results[1].args[1][1]["k"] is None and results[-1].kwargs == kwargs
    assert results[1].errors == [] and results[1].worker_ids == []


def test_enqueue_many_checks_every_call_even_among_repeats():
    good = ((1, 2), {})
    with pytest.raises(ArgumentsNotJSON, match="item 3 of the bulk enqueue"):
        enqueue_many(tasks.add, [good, good, good, ((1, object()), {}), good])
    assert not Job.objects.exists()


def test_enqueue_many_results_keep_the_frameworks_normalisation():
    # Integer keys become strings in JSON; the result shows what was passed, as
    # the framework's own constructor normalises it, for every repeated call.
    kwargs = {"a": {1: "one"}}
    results = enqueue_many(tasks.add, [((), kwargs)] * 3)
    assert [r.kwargs for r in results] == [{"a": {1: "one"}}] * 3
    assert results[1].kwargs is not results[2].kwargs


@pytest.mark.parametrize("count", [3, 2500])  # INSERT path and COPY path
def test_enqueue_many_without_results_returns_the_job_ids_in_order(count):
    items = [((i, i), {}) for i in range(count // 2)] + [((1, 2), {"b": 3})] * (count - count // 2)
    ids = enqueue_many(tasks.add, items, results=False)
    assert all(type(job_id) is int for job_id in ids)
    assert ids == sorted(ids) and len(set(ids)) == count
    stored = dict(Job.objects.filter(pk__in=ids).values_list("pk", "args"))
    assert [stored[job_id] for job_id in ids] == [list(args) for args, _ in items]
    assert tasks.add.get_result(str(ids[-1])).kwargs == {"b": 3}
    assert enqueue_many(tasks.add, [], results=False) == []


def test_enqueue_many_without_results_still_signals_every_job():
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append((task_result.id, task_result.args))

    task_enqueued.connect(receiver)
    try:
        ids = enqueue_many(tasks.add, [((1, 1), {})] * 3 + [((2, 2), {})], results=False)
    finally:
        task_enqueued.disconnect(receiver)
    assert seen == [(str(i), a) for i, a in zip(ids, [[1, 1]] * 3 + [[2, 2]], strict=True)]


def test_enqueue_many_without_results_of_a_unique_task_returns_the_live_ids():
    ids = enqueue_many(tasks.unique_add, [((7, 7), {}), ((7, 7), {})], results=False)
    assert ids[0] == ids[1] and Job.objects.get().pk == ids[0]


@pytest.mark.parametrize("count", [3, 2500])  # INSERT path and COPY path
def test_enqueue_many_from_a_generator_reusing_one_object_stores_each_value(count):
    # A generator may hand out the same dict again with other contents: each call
    # is checked and stored with the values it had when it was produced.
    kwargs: dict = {}

    def calls():
        for i in range(count):
            kwargs["b"] = i
            yield (1,), kwargs

    results = enqueue_many(tasks.add, calls())
    stored = dict(Job.objects.values_list("pk", "kwargs"))
    assert [stored[int(r.id)] for r in results] == [{"b": i} for i in range(count)]
    with pytest.raises(ArgumentsNotJSON, match=f"item {count} of the bulk enqueue"):

        def bad_last():
            yield from calls()
            kwargs["b"] = object()
            yield (1,), kwargs

        enqueue_many(tasks.add, bad_last())
    assert Job.objects.count() == count


def test_reserving_ids_looks_the_sequence_up_once():
    # Per id, the catalog lookup made drawing 100,000 ids five times slower.
    from django.db import connection

    from django_pgqueue import sql

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (VERBOSE) " + sql.RESERVE_JOB_IDS, [1000, "default"])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert plan.count("pg_get_serial_sequence") == 1, plan


def test_aenqueue_and_aget_result():
    async def from_async_code():
        result = await tasks.add.aenqueue(20, 22)
        return result, await tasks.add.aget_result(result.id)

    result, fetched = async_to_sync(from_async_code)()
    assert fetched.id == result.id
    assert fetched.status == TaskResultStatus.READY
    assert fetched.args == [20, 22]


def test_enqueue_goes_through_execute_wrappers():
    from django.db import connection

    seen = []

    def wrapper(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        tasks.add.enqueue(1, 2)
    assert len(seen) == 1 and "pgqueue:enqueue" in seen[0]


def _prepared_statements() -> list[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def test_enqueue_is_a_prepared_statement_and_django_queries_stay_unprepared():
    from django.db import connection

    connection.close()  # a fresh session: nothing prepared yet
    for n in range(3):
        tasks.add.enqueue(n, n)
        Job.objects.filter(pk=0).exists()  # a query of Django's own, several times
    prepared = _prepared_statements()
    assert len(prepared) == 1 and "pgqueue:enqueue" in prepared[0]
    assert connection.connection.prepare_threshold is None  # Django's setting is back
    assert Job.objects.count() == 3


def test_enqueue_prepares_nothing_when_prepared_statements_are_off(settings):
    from django.db import connection

    settings.PGQUEUE = {**settings.PGQUEUE, "PREPARED_STATEMENTS": False}
    connection.close()
    tasks.add.enqueue(1, 1)
    assert _prepared_statements() == []


def test_a_failed_prepared_enqueue_leaves_the_connection_usable():
    from django.db import IntegrityError, connection

    connection.close()
    tasks.add.enqueue(1, 1)  # prepared now
    with pytest.raises(IntegrityError), transaction.atomic():
        tasks.add.using(priority=0).enqueue(2, 2)
        with connection.cursor() as cursor:  # break the transaction on purpose
            cursor.execute("INSERT INTO pgqueue_job (id) VALUES (NULL)")
    tasks.add.enqueue(3, 3)  # the rollback cleared psycopg's cache; prepared again
    assert connection.connection.prepare_threshold is None
    assert sorted(Job.objects.values_list("args", flat=True)) == [[1, 1], [3, 3]]


@pytest.mark.parametrize(
    "count", [1, 200, COPY_THRESHOLD - 1, COPY_THRESHOLD, 2 * COPY_THRESHOLD + 1]
)
def test_enqueue_many_statements_do_not_grow_with_rows_and_copy_takes_over_at_the_threshold(
    count,
):
    """Ids reserved in one statement, then the rows in one INSERT below COPY_THRESHOLD,
    or through COPY from it on (COPY is no execute(): Django's capture does not see
    it, so the rows found with no INSERT captured came through it)."""
    from django.db import connection

    with CaptureQueriesContext(connection) as ctx:
        results = enqueue_many(tasks.add, [((i, -i), {}) for i in range(count)])
    statements = [
        (re.findall(r"/\* pgqueue:(\w+) \*/", q["sql"]) or [q["sql"]])[0]
        for q in ctx.captured_queries
    ]
    insert = ["enqueue_many"] if count < COPY_THRESHOLD else []
    assert statements == ["BEGIN", "reserve_ids", *insert, "COMMIT"], statements
    assert Job.objects.count() == count
    last = Job.objects.get(pk=int(results[-1].id))
    assert last.args == [count - 1, 1 - count] and last.status == "pending"
