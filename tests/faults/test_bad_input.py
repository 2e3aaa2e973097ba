"""Bad input at enqueue and in stored rows: a clear error or a recorded failed attempt,
never a half-written row (catalogue S2, job side; webhook inputs are covered by
tests/webhooks/test_ssrf.py and test_engine.py).
"""

from __future__ import annotations

import decimal

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group
from django.db import transaction
from hypothesis import HealthCheck, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from django_pgqueue import enqueue_many
from django_pgqueue.exceptions import ArgumentsNotJSON, PayloadNotJSON, PayloadTooLarge

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


#: Arguments PostgreSQL stores and Python cannot decode (SQL expressions), as a
#: hand-written INSERT or another program may have written them.
UNDECODABLE_ARGS = {
    "deep": "(repeat('[', 5000) || repeat(']', 5000))::jsonb",
    "huge_int": "('[' || repeat('7', 5000) || ']')::jsonb",
    "float_overflow": "('[' || repeat('9', 400) || '.5]')::jsonb",
}


def plant_job(args_sql: str) -> int:
    """A pending job of ``add`` whose arguments are the SQL expression ``args_sql``,
    inserted straight into the table, past every door."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (status, priority, attempts, max_attempts,"
            " next_attempt_at, worker_id, last_error, errors, created_at, updated_at,"
            " task_path, queue_name, backend, args, kwargs, worker_ids, atomic)"
            " VALUES ('pending', 0, 0, 1, now(), '', '', '[]', now(), now(),"
            f" 'testproject.demo.tasks.add', 'default', 'default', {args_sql},"
            " '{}', '[]', false) RETURNING id"
        )
        return int(cursor.fetchone()[0])


def test_get_result_of_a_job_python_cannot_decode_names_the_job():
    from django_pgqueue.exceptions import StoredJSONNotDecodable
    from testproject.demo import tasks

    bad = plant_job(UNDECODABLE_ARGS["deep"])
    with pytest.raises(StoredJSONNotDecodable, match=f"Job {bad} holds JSON .*RecursionError"):
        tasks.add.get_result(str(bad))


@pytest.mark.parametrize("kind", sorted(UNDECODABLE_ARGS))
def test_stored_arguments_python_cannot_decode_fail_their_job_alone(kind, run_worker):
    """A claimed row whose arguments cannot be decoded is a failed attempt of its own
    job, named; the jobs claimed in the same batch run once, with one attempt each
    (before, the batch's decoding raised: every row of it sat leased until its
    lease lapsed, then came back with an extra attempt, the poison row with them)."""

    from django_pgqueue import enqueue_many
    from django_pgqueue.models import Job
    from testproject.demo import tasks

    good = [int(r.id) for r in enqueue_many(tasks.record_run, [((), {})] * 5)]
    bad = plant_job(UNDECODABLE_ARGS[kind])
    run_worker(lease_seconds=30)
    # Not whole model instances: Python cannot decode the bad row's arguments.
    rows = {
        row[0]: row[1:]
        for row in Job.objects.filter(id__in=[*good, bad]).values_list(
            "id", "status", "attempts", "last_error", "errors"
        )
    }
    assert [rows[i][:2] for i in good] == [("succeeded", 1)] * 5
    status, attempts, last_error, errors = rows[bad]
    assert (status, attempts) == ("dead", 1)
    assert last_error.startswith("ArgumentsNotDecodable: job "), last_error
    assert errors[0]["exception_class_path"] == "django_pgqueue.exceptions.ArgumentsNotDecodable"


@pytest.mark.parametrize("stored", ["42", '"x"', "[1]", '{"a": 1}'])
def test_a_retried_job_whose_error_history_is_no_list_runs_once(stored, run_worker):
    """A job due again whose error history someone wrote by SQL in another shape: its
    attempt builds its TaskResult (``takes_context``), runs once and succeeds; the
    history's problem is one entry of ``context.task_result.errors``, not an exception
    in the worker."""
    from django.db import connection

    from django_pgqueue.models import Job
    from testproject.demo import tasks
    from testproject.demo.models import TaskRun

    job = int(tasks.record_run.enqueue(label="retried").id)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgqueue_job SET status = 'failed', errors = %s::jsonb WHERE id = %s",
            [stored, job],
        )
    run_worker()
    row = Job.objects.values("status", "attempts").get(pk=job)
    assert row == {"status": "succeeded", "attempts": 1}
    assert TaskRun.objects.filter(job_id=job).count() == 1


# -- the input contract (docs/tasks.md, "What arguments may be") --------------------


def _nested(depth: int, leaf: object = 1) -> object:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def _usable_after(refused) -> None:
    """Run ``refused`` (which must raise) inside atomic(); the transaction goes on."""
    from testproject.demo.models import TaskRun

    before = TaskRun.objects.count()
    with transaction.atomic():
        with pytest.raises((ArgumentsNotJSON, PayloadNotJSON, PayloadTooLarge, ValueError)):
            refused()
        TaskRun.objects.create(job_id=0, attempt=1, pid=0, label="after a refused call")
    assert TaskRun.objects.count() == before + 1


def test_deep_arguments_are_refused_before_the_insert():
    """Too deep is refused at enqueue, naming the argument, the path and the setting;
    nothing is written (before, the row was inserted and then RecursionError raised)."""
    from django_pgqueue.models import Job
    from testproject.demo import tasks

    for depth in (150, 5000):
        with pytest.raises(ArgumentsNotJSON) as info:
            tasks.add.enqueue(_nested(depth), 1)
        message = str(info.value)
        assert "positional argument 0 is nested too deeply" in message
        assert "args[0][0]['k'][0]['k']" in message and "MAX_JSON_DEPTH" in message
        with pytest.raises(ArgumentsNotJSON, match=r"\(item 1 of the bulk enqueue\): keyword"):
            enqueue_many(tasks.add, [((1, 2), {}), ((1,), {"b": _nested(depth)})])
    assert Job.objects.count() == 0
    _usable_after(lambda: tasks.add.enqueue(1, b=_nested(500)))
    assert Job.objects.count() == 0


def test_arguments_at_the_depth_limit_round_trip_through_a_worker(settings, run_worker):
    from django_pgqueue.models import Job
    from testproject.demo import tasks

    settings.PGQUEUE = {**settings.PGQUEUE, "MAX_JSON_DEPTH": 30}
    deepest = _nested(29)  # args are a list: one level is the queue's own
    result = tasks.echo.enqueue(deepest)
    assert result.args == [deepest]
    with pytest.raises(ArgumentsNotJSON, match="nested 31 levels deep, more than 30"):
        tasks.echo.enqueue(_nested(30))
    run_worker()
    job = Job.objects.get()
    assert job.status == "succeeded" and job.args == [deepest] and job.result == deepest


def test_deep_return_value_is_a_recorded_failure_not_a_thread_death(settings, run_worker):
    from django_pgqueue.models import Job
    from testproject.demo import tasks

    settings.PGQUEUE = {**settings.PGQUEUE, "MAX_JSON_DEPTH": 10}
    # Rows written by older code (or by hand): the task returns what it was given.
    jobs = [tasks.echo.enqueue(i) for i in range(5)]
    deep = Job.objects.create(
        task_path="testproject.demo.tasks.echo", args=[_nested(40)], max_attempts=1
    )
    nul = Job.objects.create(
        task_path="testproject.demo.tasks.echo", args=["a\\u0000"], max_attempts=1
    )
    run_worker()
    deep.refresh_from_db()
    assert deep.status == "dead" and deep.result is None
    assert deep.errors[-1]["exception_class_path"] == "django_pgqueue.exceptions.ResultNotStorable"
    assert "the result is nested too deeply" in deep.last_error
    nul.refresh_from_db()
    assert nul.status == "succeeded" and nul.result == "a\\u0000"  # six characters, no NUL
    assert all(Job.objects.get(pk=r.id).status == "succeeded" for r in jobs)


def test_size_is_counted_in_utf8_bytes(settings):
    """400 "€" are 400 characters but 1200 bytes: over a 1000-byte limit."""
    from django_pgqueue.models import Job
    from testproject.demo import tasks

    settings.PGQUEUE = {**settings.PGQUEUE, "MAX_ARGS_BYTES": 1000}
    with pytest.raises(PayloadTooLarge, match=r"1204 bytes of JSON \(UTF-8\)"):
        tasks.echo.enqueue("€" * 400)
    with pytest.raises(PayloadTooLarge, match="MAX_ARGS_BYTES"):
        enqueue_many(tasks.echo, [(("€" * 400,), {})])
    with pytest.raises(PayloadTooLarge, match="MAX_ARGS_BYTES"):
        tasks.echo.enqueue(value="€" * 330)  # 990 + the kwargs' JSON around it
    assert Job.objects.count() == 0
    tasks.echo.enqueue("€" * 300)  # 906 bytes with the brackets and quotes
    assert Job.objects.get().args == ["€" * 300]


HOSTILE_TEXT = [
    pytest.param("a\x00b", "a NUL character", id="nul"),
    pytest.param("a\udc80b", "a lone surrogate", id="low-surrogate"),
    pytest.param("\ud83d", "a lone surrogate", id="high-surrogate"),
    pytest.param("\ud83d\ude00", "a lone surrogate", id="pair-as-two-code-points"),
]


@pytest.mark.parametrize(("text", "problem"), HOSTILE_TEXT)
def test_nul_and_surrogates_are_refused_naming_argument_and_path(text, problem):
    from django_pgqueue.models import Job
    from testproject.demo import tasks

    user = {"name": "ok", "tags": ["a", "b", "c", text]}
    cases = [
        (
            lambda: tasks.echo.enqueue(value=user),
            "keyword argument 'value'",
            "kwargs['value']['tags'][3]",
        ),
        (lambda: tasks.add.enqueue([text], 2), "positional argument 0", "args[0][0]"),
        (lambda: tasks.echo.enqueue({text: 1}), "positional argument 0", "has a key holding"),
        (
            lambda: enqueue_many(tasks.echo, [(("fine",), {}), ((), {"value": user})]),
            "keyword argument 'value'",
            "kwargs['value']['tags'][3]",
        ),
        (
            lambda: async_to_sync(tasks.echo.aenqueue)(value=user),
            "keyword argument 'value'",
            "kwargs['value']['tags'][3]",
        ),
    ]
    for call, argument, path in cases:
        with pytest.raises(ArgumentsNotJSON) as info:
            call()
        message = str(info.value)
        assert argument in message and path in message and problem in message, message
        _usable_after(call)
    assert Job.objects.count() == 0


@pytest.mark.parametrize(("text", "problem"), HOSTILE_TEXT)
def test_send_event_refuses_hostile_text_before_any_sql(text, problem):
    from django_pgqueue import send_event
    from django_pgqueue.models import Event

    with pytest.raises(PayloadNotJSON) as info:
        send_event("order.paid", {"order": {"lines": [{"sku": text}]}})
    assert "payload['order']['lines'][0]['sku']" in str(info.value)
    assert problem in str(info.value)
    with pytest.raises(ValueError, match="event_type must be"):
        send_event(f"order.{text}", {})
    with pytest.raises(ValueError, match="idempotency_key must be"):
        send_event("order.paid", {}, idempotency_key=f"key-{text}")
    _usable_after(lambda: send_event("order.paid", {"sku": text}))
    _usable_after(lambda: send_event(f"order.{text}", {}))
    _usable_after(lambda: send_event("order.paid", {}, idempotency_key=text))
    assert Event.objects.count() == 0


@pytest.mark.parametrize(
    "event_type", ["", " order.paid", "order paid", ".paid", "x" * 256, "ordér.paid", 7]
)
def test_event_type_rule(event_type):
    from django_pgqueue import send_event

    with pytest.raises(ValueError, match="event_type must be 1 to 255 characters"):
        send_event(event_type, {})


@pytest.mark.parametrize("key", ["", "two words", "tab\tkey", "k" * 256, "clé", 42])
def test_idempotency_key_rule(key):
    from django_pgqueue import send_event

    with pytest.raises(ValueError, match="1 to 255 visible ASCII characters"):
        send_event("order.paid", {}, idempotency_key=key)


def test_accepted_event_types_and_keys():
    from django_pgqueue import send_event

    for n, event_type in enumerate(["order.paid", "Invoice:Created", "orders/create", "a"]):
        event = send_event(event_type, {"n": n}, idempotency_key=f"{event_type}#{n}" + "k" * 200)
        assert event.event_type == event_type


# -- fuzzing the contract: a clean refusal naming a path, or an exact round trip ----

_HOSTILE = st.sampled_from(["\x00", "\ud800", "\udfff", "\\u0000", "\\ud800", "€", "😀", '"'])
_TEXT = st.lists(st.one_of(st.characters(codec="utf-8"), _HOSTILE), max_size=8).map("".join)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    # jsonb keeps numbers as numeric: beyond 2**53 a float comes back as its decimal.
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15),
    _TEXT,
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=20,
)
_DEEP = st.builds(_nested, st.integers(min_value=0, max_value=14), _JSON)


@hyp_settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    args=st.lists(st.one_of(_JSON, _DEEP), max_size=3),
    kwargs=st.dictionaries(
        st.text(alphabet="abcdefgh", min_size=1, max_size=4), st.one_of(_JSON, _DEEP), max_size=3
    ),
    bulk=st.booleans(),
)
def test_fuzzed_arguments_are_refused_by_path_or_stored_exactly(args, kwargs, bulk, settings):
    """Random nested JSON with NULs, surrogates and deep nesting: either a refusal that
    names where, with no row and the transaction still usable, or an exact round trip."""
    from django_pgqueue.models import Job
    from testproject.demo import tasks

    settings.PGQUEUE = {**settings.PGQUEUE, "MAX_JSON_DEPTH": 8, "MAX_ARGS_BYTES": 2000}
    before = Job.objects.count()
    with transaction.atomic():
        try:
            if bulk:
                [result] = enqueue_many(tasks.echo, [(args, kwargs)])
            else:
                result = tasks.echo.enqueue(*args, **kwargs)
        except (ArgumentsNotJSON, PayloadTooLarge) as exc:
            message = str(exc)
            assert "args" in message or "kwargs" in message, message
            assert "argument" in message, message
            assert Job.objects.count() == before  # and the transaction is still usable
            return
    job = Job.objects.get(pk=result.id)
    assert job.args == args and job.kwargs == kwargs
    assert result.args == args and result.kwargs == kwargs
