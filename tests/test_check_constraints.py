"""The queue tables' CHECK constraints: every rule holds at the SQL door and in model
validation, in the shape PostgreSQL prepares cheapest (it prepares each CHECK again
at every statement that writes a row: ``models/expressions.py``), and an install
migrates to that shape online and back."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from django_pgqueue.models import Job

from .support.scratch import manage, scratch_databases

JOB_ROW = """
INSERT INTO pgqueue_job (status, priority, attempts, max_attempts, next_attempt_at,
    worker_id, last_error, errors, created_at, updated_at, task_path, queue_name, backend,
    args, kwargs, worker_ids, atomic, locked_by, locked_until, finished_at,
    pending_parents, failed_parents)
VALUES (%(status)s, 0, %(attempts)s, %(max_attempts)s, now(), '', '', '[]', now(), now(),
    'testproject.demo.tasks.add', 'default', 'default', '[]', '{}', '[]', false,
    %(locked_by)s, %(locked_until)s, %(finished_at)s, %(pending_parents)s,
    %(failed_parents)s)
"""

GOOD = {
    "status": "pending",
    "attempts": 0,
    "max_attempts": 1,
    "locked_by": None,
    "locked_until": None,
    "finished_at": None,
    "pending_parents": None,
    "failed_parents": None,
}
LEASE = {"locked_by": uuid.uuid4(), "locked_until": timezone.now()}

#: (what is wrong, the row's columns, the constraint that refuses it)
BAD_JOBS = [
    ("an unknown state", {"status": "bogus"}, "pgq_job_status_valid"),
    ("a state of another case", {"status": "PENDING"}, "pgq_job_status_valid"),
    ("running without a lease", {"status": "in_progress"}, "pgq_job_lease_iff_running"),
    (
        "running without a token",
        {"status": "in_progress", "locked_until": timezone.now()},
        "pgq_job_lease_iff_running",
    ),
    (
        "a lease on a row not running",
        {"status": "failed", "locked_until": timezone.now()},
        "pgq_job_lease_iff_running",
    ),
    ("negative attempts", {"attempts": -1}, "pgq_job_attempts_range"),
    ("no attempt allowed", {"max_attempts": 0}, "pgq_job_attempts_range"),
    ("succeeded without a time", {"status": "succeeded"}, "pgq_job_finished_has_time"),
    ("negative pending parents", {"pending_parents": -1}, "pgq_job_parents_range"),
    ("negative failed parents", {"failed_parents": -2}, "pgq_job_parents_range"),
]
BAD = pytest.mark.parametrize(
    ("problem", "columns", "constraint"), BAD_JOBS, ids=[b[0] for b in BAD_JOBS]
)
GOOD_JOBS = [
    {},
    {"status": "in_progress", **LEASE},
    # A finished row keeps the token of its last claim (an ambiguous commit's proof).
    {"status": "succeeded", "finished_at": timezone.now(), "locked_by": uuid.uuid4()},
    {"status": "waiting", "pending_parents": 2, "failed_parents": 0},
]


@pytest.mark.django_db
@BAD
def test_a_row_breaking_a_rule_is_refused_at_the_sql_door_naming_it(problem, columns, constraint):
    with (
        pytest.raises(IntegrityError, match=constraint),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(JOB_ROW, {**GOOD, **columns})


@pytest.mark.django_db
def test_rows_keeping_every_rule_are_written():
    with connection.cursor() as cursor:
        for columns in GOOD_JOBS:
            cursor.execute(JOB_ROW, {**GOOD, **columns})
    assert Job.objects.count() == len(GOOD_JOBS)


@pytest.mark.django_db
def test_an_update_breaking_a_rule_is_refused():
    with connection.cursor() as cursor:
        cursor.execute(JOB_ROW + " RETURNING id", GOOD)
        (job_id,) = cursor.fetchone()
    with pytest.raises(IntegrityError, match="pgq_job_lease_iff_running"), transaction.atomic():
        Job.objects.filter(pk=job_id).update(status="in_progress")
    with pytest.raises(IntegrityError, match="pgq_job_status_valid"), transaction.atomic():
        Job.objects.filter(pk=job_id).update(status="nope")


@BAD
@pytest.mark.django_db
def test_model_validation_refuses_what_the_database_refuses(problem, columns, constraint):
    """``validate_constraints`` (a ModelForm, ``full_clean``) asks the database about
    the same condition: a row with its lease columns None must be refused too (a
    ``Case`` of ``Q`` objects came out wrong there)."""
    job = Job(task_path="testproject.demo.tasks.add", **{**GOOD, **columns})
    with pytest.raises(ValidationError, match=constraint):
        job.validate_constraints()


@pytest.mark.django_db
@pytest.mark.parametrize("columns", GOOD_JOBS)
def test_model_validation_accepts_a_row_keeping_every_rule(columns):
    Job(task_path="testproject.demo.tasks.add", **{**GOOD, **columns}).validate_constraints()


CHEAP_SHAPE = {
    "pgqueue_job": {
        "pgq_job_status_valid",
        "pgq_job_lease_iff_running",
        "pgq_job_attempts_range",
        "pgq_job_finished_has_time",
        "pgq_job_parents_range",
    },
    "pgqueue_delivery": {
        "pgq_dlv_status_valid",
        "pgq_dlv_lease_iff_running",
        "pgq_dlv_attempts_range",
        "pgq_dlv_finished_has_time",
    },
    # Written by the claims (a flow-controlled queue's fence and rate state) and the
    # HTTP API's authentication: each limit's range is held by its named rule alone.
    "pgqueue_queue": {
        "pgq_queue_concurrency_pos",
        "pgq_queue_key_conc_pos",
        "pgq_queue_rate_limit_pos",
        "pgq_queue_rate_period_pos",
        "pgq_queue_key_rate_pos",
        "pgq_queue_key_period_pos",
    },
    "pgqueue_endpoint": {
        "pgq_ep_breaker_valid",
        "pgq_ep_open_has_until",
        "pgq_ep_max_in_flight_pos",
        "pgq_ep_rate_limit_pos",
        "pgq_ep_rate_period_pos",
        "pgq_ep_ordering_valid",
        "pgq_ep_secret_encrypted",
        # The column's only rule: the field's own CHECK is its one declaration.
        "pgqueue_endpoint_consecutive_failures_check",
    },
    "pgqueue_api_key": {"pgq_apikey_rate_pos"},
    "pgqueue_mq_queue": {
        "pgqueue_mq_archive_retention_range",
        "pgqueue_mq_dead_letter_other",
        "pgqueue_mq_dead_letter_reads",
        "pgqueue_mq_max_reads_positive",
        "pgqueue_mq_partitioned_name_length",
    },
    "pgqueue_delivery_attempt": {
        "pgq_att_attempt_positive",
        "pgqueue_delivery_attempt_duration_ms_check",
        "pgqueue_delivery_attempt_status_code_check",
    },
}


def check_constraints(conn, table: str) -> dict[str, tuple[str, bool]]:
    return {
        name: (definition, validated)
        for name, definition, validated in conn.execute(
            "SELECT conname, pg_get_constraintdef(oid), convalidated FROM pg_constraint"
            " WHERE conrelid = %s::regclass AND contype = 'c'",
            (table,),
        )
    }


@pytest.mark.django_db
def test_the_checks_keep_the_shape_postgresql_prepares_cheapest():
    """No CHECK a field adds on its own (a ``PositiveIntegerField``'s), no array
    built from casts, one test of the state for the lease: each of these is
    prepared again at every one-row write (docs/performance.md, "CHECK constraints
    on the one-row paths")."""
    conn = connection.connection
    for table, names in CHEAP_SHAPE.items():
        found = check_constraints(conn, table)
        assert set(found) == names, table
        for name, (definition, validated) in found.items():
            assert validated, name
            assert "ARRAY[" not in definition, definition
        for lease in [d for n, (d, _) in found.items() if n.endswith("lease_iff_running")]:
            assert lease.count("'in_progress'") == 1 and "CASE" in lease, lease


#: (table, a column set out of its range, the rule that refuses it)
BAD_LIMITS = [
    ("pgqueue_queue", "concurrency = 0", "pgq_queue_concurrency_pos"),
    ("pgqueue_queue", "key_concurrency = -1", "pgq_queue_key_conc_pos"),
    ("pgqueue_queue", "rate_limit = 0", "pgq_queue_rate_limit_pos"),
    ("pgqueue_queue", "rate_period = 0", "pgq_queue_rate_period_pos"),
    ("pgqueue_queue", "key_rate_limit = 0", "pgq_queue_key_rate_pos"),
    ("pgqueue_queue", "key_rate_period = -5", "pgq_queue_key_period_pos"),
    ("pgqueue_endpoint", "max_in_flight = 0", "pgq_ep_max_in_flight_pos"),
    ("pgqueue_endpoint", "rate_limit = -1", "pgq_ep_rate_limit_pos"),
    ("pgqueue_endpoint", "rate_period = 0", "pgq_ep_rate_period_pos"),
    ("pgqueue_endpoint", "breaker_state = 'CLOSED'", "pgq_ep_breaker_valid"),
    ("pgqueue_endpoint", "ordering = 'fifo'", "pgq_ep_ordering_valid"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("table", "assignment", "constraint"), BAD_LIMITS)
def test_a_limit_out_of_its_range_is_refused_at_the_sql_door(table, assignment, constraint):
    """The columns lost only their second CHECK: each range is still refused, by its
    named rule, for a row written by SQL as for one written through a model."""
    from django_pgqueue import queues
    from django_pgqueue.models import Endpoint

    queues.configure("limits", concurrency=2)
    Endpoint.objects.create(url="https://example.com/hook")
    with (
        pytest.raises(IntegrityError, match=constraint),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(f"UPDATE {table} SET {assignment}")


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["max_in_flight", "rate_limit", "rate_period"])
def test_an_endpoint_form_refuses_a_limit_below_one(field):
    """Model validation names the field, as the form the admin and the portal show."""
    from django_pgqueue.models import Endpoint

    endpoint = Endpoint(url="https://example.com/hook", **{field: 0})
    with pytest.raises(ValidationError) as caught:
        endpoint.full_clean()
    assert field in caught.value.message_dict


@pytest.mark.django_db(databases=[])
def test_the_limits_migrate_to_one_rule_each_and_back():
    """0007 drops the fields' own CHECKs and reshapes the endpoint's lists of values;
    ``migrate django_pgqueue 0006`` puts every one back, with a queue row kept."""
    tables = (
        "pgqueue_queue",
        "pgqueue_endpoint",
        "pgqueue_api_key",
        "pgqueue_mq_queue",
        "pgqueue_delivery_attempt",
    )
    with scratch_databases("limits") as (url,):
        manage("migrate", "django_pgqueue", "0006", "--verbosity", "0", url=url)
        with psycopg.connect(url, autocommit=True) as conn:
            before = {t: check_constraints(conn, t) for t in tables}
            assert "pgqueue_queue_concurrency_check" in before["pgqueue_queue"]
            conn.execute("INSERT INTO pgqueue_queue (name, concurrency) VALUES ('q', 3)")
        manage("migrate", "--verbosity", "0", url=url)
        with psycopg.connect(url, autocommit=True) as conn:
            for table in tables:
                assert set(check_constraints(conn, table)) == CHEAP_SHAPE[table], table
            with pytest.raises(psycopg.errors.CheckViolation, match="pgq_queue_concurrency_pos"):
                conn.execute("UPDATE pgqueue_queue SET concurrency = 0")
        manage("migrate", "django_pgqueue", "0006", "--verbosity", "0", url=url)
        with psycopg.connect(url, autocommit=True) as conn:
            assert {t: check_constraints(conn, t) for t in tables} == before
            assert conn.execute("SELECT concurrency FROM pgqueue_queue").fetchone() == (3,)


@pytest.mark.django_db(databases=[])
def test_an_install_with_rows_migrates_to_the_new_shape_and_back():
    """From 0004 with live rows of every kind: the new constraints are validated
    against them (0006), and ``migrate django_pgqueue 0004`` puts the previous shapes
    back."""
    with scratch_databases("checks") as (url,):
        manage("migrate", "django_pgqueue", "0004", "--verbosity", "0", url=url)
        with psycopg.connect(url, autocommit=True) as conn:
            before = check_constraints(conn, "pgqueue_job")
            assert "pgqueue_job_attempts_check" in before
            for columns in GOOD_JOBS:
                conn.execute(JOB_ROW, {**GOOD, **columns})
        manage("migrate", "--verbosity", "0", url=url)
        with psycopg.connect(url, autocommit=True) as conn:
            after = check_constraints(conn, "pgqueue_job")
            assert set(after) == CHEAP_SHAPE["pgqueue_job"]
            assert all(validated for _, validated in after.values())
            with pytest.raises(psycopg.errors.CheckViolation, match="pgq_job_parents_range"):
                conn.execute(JOB_ROW, {**GOOD, "pending_parents": -1})
            assert conn.execute("SELECT count(*) FROM pgqueue_job").fetchone()[0] == len(GOOD_JOBS)
        manage("migrate", "django_pgqueue", "0004", "--verbosity", "0", url=url)
        with psycopg.connect(url, autocommit=True) as conn:
            back = check_constraints(conn, "pgqueue_job")
            assert {n for n in back if n.startswith("pgq_")} == {
                n for n in before if n.startswith("pgq_")
            }
            assert back["pgq_job_status_valid"][0] == before["pgq_job_status_valid"][0]
            assert len(back) == len(before)
            with pytest.raises(psycopg.errors.CheckViolation, match="pending_parents"):
                conn.execute(JOB_ROW, {**GOOD, "pending_parents": -1})
