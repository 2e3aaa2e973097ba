"""The queue on its own database: the router, its checks, and every reader and writer.

The test settings have a second database, ``queue``. Here ``PGQUEUE["DATABASE"]``
points at it and ``DATABASE_ROUTERS`` holds ``QueueRouter``, as in a project that
moved its queue out; ``default`` keeps users, permissions and the admin's log.
Every test checks where the rows went, not only that the feature answered.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import subprocess
from io import StringIO

import psycopg
import pytest
from asgiref.sync import async_to_sync
from django.apps import apps
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connections, router, transaction
from django.urls import reverse
from django.utils import timezone

from django_pgqueue import enqueue_many, send_event, sql
from django_pgqueue.checks import ROUTER_PATH, check_routing, check_tables
from django_pgqueue.compat import TaskResultStatus
from django_pgqueue.exceptions import CrossDatabaseEnqueueWarning
from django_pgqueue.models import Delivery, Endpoint, Event, Job, Status
from testproject.demo.tasks import add, noop

from .support import scratch

QUEUE = "queue"
BOTH = ["default", QUEUE]
CHANGELIST = "admin:django_pgqueue_job_changelist"

pytestmark = pytest.mark.django_db(databases=BOTH, transaction=True)


@pytest.fixture
def queue_db(settings) -> str:
    """The queue moved to the ``queue`` database, with the router installed."""
    settings.PGQUEUE = {**settings.PGQUEUE, "DATABASE": QUEUE}
    settings.DATABASE_ROUTERS = [ROUTER_PATH]
    return QUEUE


def queue_models():
    return apps.get_app_config("django_pgqueue").get_models()


def ids(messages):
    return [m.id for m in messages]


def jobs_in(alias: str) -> set[int]:
    return set(Job.objects.using(alias).values_list("pk", flat=True))


class Rollback(Exception):
    pass


# --------------------------------------------------------------------------- the router


@pytest.mark.django_db(databases=[])
def test_router_places_the_queue_models_and_nothing_else(queue_db):
    for model in (Job, Endpoint, Event, Delivery):
        assert router.db_for_read(model) == QUEUE
        assert router.db_for_write(model) == QUEUE
        assert router.allow_migrate_model(QUEUE, model)
        assert not router.allow_migrate_model("default", model)
    # Users, permissions, content types and the admin's log stay where they were.
    for model in (User, ContentType, LogEntry):
        assert router.db_for_read(model) == "default"
        assert router.db_for_write(model) == "default"
        assert router.allow_migrate_model("default", model)


@pytest.mark.django_db(databases=[])
def test_router_on_the_default_database_changes_nothing(settings):
    settings.DATABASE_ROUTERS = [ROUTER_PATH]
    assert router.db_for_read(Job) == router.db_for_write(Job) == "default"
    assert router.allow_migrate_model("default", Job)
    assert not router.allow_migrate_model(QUEUE, Job)


# --------------------------------------------------------------------------- the checks


@pytest.mark.django_db(databases=[])
def test_check_e004_fires_without_the_router(settings):
    settings.PGQUEUE = {**settings.PGQUEUE, "DATABASE": QUEUE}
    settings.DATABASE_ROUTERS = []
    messages = check_routing()
    assert ids(messages) == ["django_pgqueue.E004"]
    assert "reads go to 'default'" in messages[0].msg
    assert "migrate creates them in 'default' too" in messages[0].msg
    assert ROUTER_PATH in messages[0].hint

    settings.DATABASE_ROUTERS = [ROUTER_PATH]
    assert check_routing() == []


@pytest.mark.django_db(databases=[])
def test_check_e004_names_a_router_that_takes_the_models_first(settings):
    settings.PGQUEUE = {**settings.PGQUEUE, "DATABASE": QUEUE}
    settings.DATABASE_ROUTERS = [EverythingToDefault(), ROUTER_PATH]
    messages = check_routing()
    assert ids(messages) == ["django_pgqueue.E004"]
    assert "writes go to 'default'" in messages[0].msg


class EverythingToDefault:
    def db_for_read(self, model, **hints):
        return "default"

    db_for_write = db_for_read


@pytest.mark.django_db(databases=[])
def test_check_e004_is_silent_with_the_queue_on_default(settings):
    settings.DATABASE_ROUTERS = []
    assert check_routing() == []


@pytest.mark.django_db(databases=BOTH)
def test_check_w002_when_the_queue_database_lacks_the_tables(queue_db):
    assert check_tables(databases=["default", QUEUE]) == []
    with connections[QUEUE].cursor() as cursor:  # rolled back with the test
        cursor.execute("ALTER TABLE pgqueue_job RENAME TO pgqueue_job_elsewhere")
    assert check_tables() == []  # no --database: no query at all
    assert check_tables(databases=["default"]) == []
    messages = check_tables(databases=[QUEUE])
    assert ids(messages) == ["django_pgqueue.W002"]
    assert "'queue' has no pgqueue_job table" in messages[0].msg
    assert "migrate --database queue" in messages[0].hint


# --------------------------------------------------------------------------- a new project


def manage(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return scratch.manage(*args, url=url, env={"PGQUEUE_DATABASE": QUEUE}, timeout=120)


@pytest.mark.django_db(databases=[])
def test_a_new_project_migrates_each_database_and_checks_the_queue_one():
    """The documented steps, in a project of two fresh databases."""
    # The settings derive the queue database's name from the first.
    with scratch.scratch_databases("two", "two_queue") as urls:
        url = urls[0]
        manage("migrate", "--verbosity", "0", url=url)
        forgot = manage("check", "--database", QUEUE, url=url).stderr
        assert "django_pgqueue.W002" in forgot and "pgqueue_job" in forgot
        manage("migrate", "--database", QUEUE, "--verbosity", "0", "django_pgqueue", url=url)
        assert "no issues" in manage("check", "--database", QUEUE, url=url).stdout

        def tables(db: str) -> set[str]:
            with psycopg.connect(db, autocommit=True) as conn:
                rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
                return {row[0] for row in rows}

        on_default, on_queue = tables(urls[0]), tables(urls[1])
        assert not {t for t in on_default if t.startswith("pgqueue_")}
        assert {"auth_user", "django_admin_log", "auth_permission"} <= on_default
        # The history's per-state tables are partitions of a model's table, and so
        # are the attempt log's days.
        days = {t for t in on_queue if re.match(sql.ATTEMPT_PARTITION_PATTERN, t)}
        assert days
        partitions = set(sql.HISTORY_STATE_TABLES) | days
        assert on_queue == {"django_migrations"} | partitions | {
            m._meta.db_table for m in queue_models()
        }
        with psycopg.connect(urls[0], autocommit=True) as conn:
            # The queue's permissions are where the users are.
            (count,) = conn.execute(
                "SELECT count(*) FROM auth_permission p JOIN django_content_type c"
                " ON c.id = p.content_type_id"
                " WHERE c.app_label = 'django_pgqueue' AND p.codename = 'replay_job'"
            ).fetchone()
        assert count == 1


# --------------------------------------------------------------------------- the whole path


def test_enqueue_run_results_and_admin_read_the_queue_database(queue_db, run_worker, admin_client):
    results = [add.enqueue(2, 3), noop.enqueue(), *enqueue_many(add, [((1, 1), {})])]
    queued = {int(r.id) for r in results}
    assert jobs_in(QUEUE) == queued
    assert jobs_in("default") == set()
    assert set(Job.objects.values_list("pk", flat=True)) == queued  # through the router

    page = admin_client.get(reverse(CHANGELIST))
    assert page.status_code == 200
    assert {job.pk for job in page.context["cl"].result_list} == queued

    run_worker(burst=True)
    assert set(Job.objects.filter(status=Status.SUCCEEDED).values_list("pk", flat=True)) == queued

    result = add.get_result(results[0].id)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert async_to_sync(add.aget_result)(results[2].id).return_value == 2

    detail = admin_client.get(reverse("admin:django_pgqueue_job_change", args=(results[0].id,)))
    assert detail.status_code == 200
    assert "add" in detail.content.decode()
    dashboard = admin_client.get(reverse("admin:django_pgqueue_job_dashboard"))
    counts = {row["stats"].name: row["stats"].counts for row in dashboard.context["queues"]}
    assert counts["default"][Status.SUCCEEDED] == 3


@pytest.fixture
def operator() -> User:
    """Staff allowed to view and operate jobs: its permissions live in ``default``."""
    user = User.objects.create_user("operator", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="django_pgqueue",
            codename__in=["view_job", "replay_job", "cancel_job"],
        )
    )
    return user


def test_admin_actions_change_the_queue_database_and_log_in_default(queue_db, operator, client):
    client.force_login(operator)
    pending = Job.objects.create(task_path="testproject.demo.tasks.noop")
    dead = Job.objects.create(
        task_path="testproject.demo.tasks.noop", status=Status.DEAD, finished_at=timezone.now()
    )
    assert jobs_in(QUEUE) == {pending.pk, dead.pk}

    data = {"action": "cancel", "_selected_action": [str(pending.pk)], "index": "0"}
    confirm = client.post(reverse(CHANGELIST), data)
    assert confirm.status_code == 200 and b'name="post" value="yes"' in confirm.content
    done = client.post(reverse(CHANGELIST), {**data, "post": "yes"})
    assert done.status_code == 302
    replay = client.post(reverse("admin:pgqueue_job_replay", args=(dead.pk,)))
    assert replay.status_code == 302

    states = dict(Job.objects.using(QUEUE).values_list("pk", "status"))
    assert states == {pending.pk: Status.CANCELLED, dead.pk: Status.PENDING}
    # The audit log is in default, pointing at the rows by content type and id.
    entries = LogEntry.objects.using("default").order_by("object_id")
    assert [(e.object_id, e.action_flag, e.user_id) for e in entries] == sorted(
        [(str(pending.pk), CHANGE, operator.pk), (str(dead.pk), CHANGE, operator.pk)]
    )
    assert {e.content_type.model_class() for e in entries} == {Job}
    assert LogEntry.objects.using(QUEUE).count() == 0
    history = client.get(reverse("admin:django_pgqueue_job_history", args=(dead.pk,)))
    assert "Replay: dead -&gt; pending" in history.content.decode()


def test_runworkers_process_runs_jobs_on_the_queue_database(worker_process):
    # The child's settings put the queue on "queue" (PGQUEUE_DATABASE) with the
    # router; its URL is derived from the test database's, as in the settings.
    job = Job.objects.using(QUEUE).create(
        task_path="testproject.demo.tasks.add", args=[20, 22], backend="default"
    )
    proc = worker_process("--burst", env={"PGQUEUE_DATABASE": QUEUE})
    assert proc.wait(60) == 0, proc.output()
    job.refresh_from_db(using=QUEUE)
    assert job.status == Status.SUCCEEDED and job.result == 42
    assert jobs_in("default") == set()


def test_prune_deletes_on_the_queue_database_only(queue_db):
    old = timezone.now() - dt.timedelta(days=30)
    fields = {
        "task_path": "testproject.demo.tasks.noop",
        "status": Status.SUCCEEDED,
        "finished_at": old,
        "updated_at": old,
    }
    on_queue = Job.objects.create(**fields)
    on_default = Job.objects.using("default").create(**fields)
    out = StringIO()
    call_command("pgqueue_prune", stdout=out)
    assert jobs_in(QUEUE) == set()
    assert jobs_in("default") == {on_default.pk}
    assert on_queue.pk not in jobs_in(QUEUE)


def test_send_event_writes_on_the_queue_database(queue_db, admin_client):
    endpoint = Endpoint.objects.create(url="https://hooks.example.com/a")
    assert endpoint._state.db == QUEUE
    event = send_event("order.paid", {"order": 1})
    assert event._state.db == QUEUE
    delivery = Delivery.objects.get(event=event)
    assert delivery.endpoint == endpoint
    assert Delivery.objects.using("default").count() == 0
    page = admin_client.get(reverse("admin:django_pgqueue_delivery_changelist"))
    assert [d.pk for d in page.context["cl"].result_list] == [delivery.pk]
    # ``using=`` still picks a database explicitly (no endpoints there).
    elsewhere = send_event("order.paid", {"order": 2}, using="default")
    assert elsewhere._state.db == "default"
    assert Event.objects.using("default").get().pk == elsewhere.pk


def test_endpoint_admin_forms_and_buttons_write_the_queue_database(queue_db, admin_client):
    added = admin_client.post(
        reverse("admin:django_pgqueue_endpoint_add"),
        {
            "url": "http://127.0.0.1:9/new",  # the test settings allow loopback
            "description": "orders",
            "event_types": "[]",
            "headers": "{}",
            "is_active": "on",
            "rate_period": "1",
            "ordering": "none",
        },
    )
    assert added.status_code == 302, added.context["adminform"].form.errors
    endpoint = Endpoint.objects.using(QUEUE).get()
    assert not Endpoint.objects.using("default").exists()
    admin_client.post(reverse("admin:pgqueue_endpoint_send_test_event", args=(endpoint.pk,)))
    admin_client.post(reverse("admin:pgqueue_endpoint_disable", args=(endpoint.pk,)))
    endpoint.refresh_from_db()
    assert not endpoint.is_active
    assert Delivery.objects.using(QUEUE).get().event.event_type == "pgqueue.test"
    logged = LogEntry.objects.using("default").filter(object_id=str(endpoint.pk))
    # Added, sent a test event, disabled: the log sits next to the users.
    flags = list(logged.order_by("id").values_list("action_flag", flat=True))
    assert flags == [ADDITION, CHANGE, CHANGE]
    assert not LogEntry.objects.using(QUEUE).exists()


# --------------------------------------------------------------------------- atomicity


def test_enqueue_inside_a_default_transaction_warns_and_survives_its_rollback(queue_db):
    outside = "outside the transaction open on 'default'"
    with (
        pytest.warns(CrossDatabaseEnqueueWarning, match=outside),
        contextlib.suppress(Rollback),
        transaction.atomic(),
    ):
        User.objects.create(username="buyer")
        result = add.enqueue(1, 2)
        raise Rollback
    # The trade made by moving the queue out: the job outlived the rollback.
    assert not User.objects.exists()
    assert jobs_in(QUEUE) == {int(result.id)}

    with pytest.warns(CrossDatabaseEnqueueWarning, match="enqueue_many"), transaction.atomic():
        enqueue_many(noop, [((), {})])
    with pytest.warns(CrossDatabaseEnqueueWarning, match="send_event"), transaction.atomic():
        send_event("order.paid", {"order": 1})


def test_no_warning_when_the_queue_database_transaction_is_open_or_none_is(queue_db):
    # pytest turns warnings into errors here: any warning fails these calls.
    add.enqueue(1, 2)
    with transaction.atomic(), transaction.atomic(using=QUEUE):
        add.enqueue(1, 2)
        send_event("order.paid", {"order": 1})
    with transaction.atomic(using=QUEUE):
        enqueue_many(noop, [((), {})])
    with transaction.atomic():  # the documented way: enqueue once the data committed
        User.objects.create(username="buyer")
        transaction.on_commit(lambda: add.enqueue(1, 2))
    assert len(jobs_in(QUEUE)) == 4


def test_no_scan_with_the_queue_on_default():
    # A transaction on another alias is the project's own multi-database design
    # then; the enqueue path does not look at other connections.
    with transaction.atomic(using=QUEUE):
        result = add.enqueue(1, 2)
    assert jobs_in("default") == {int(result.id)}


# --------------------------------------------------------------------------- the benchmark


@pytest.mark.timeout(300)
def test_bench_runs_on_a_scratch_copy_of_the_queue_database(queue_db, monkeypatch, tmp_path):
    monkeypatch.setenv("PGQUEUE_DATABASE", QUEUE)  # the children's settings, as ours
    queue_name = connections[QUEUE].settings_dict["NAME"]
    default_name = connections["default"].settings_dict["NAME"]
    out = tmp_path / "bench.json"
    call_command(
        "pgqueue_bench",
        "--only=enqueue,drain",
        "--repeat=1",
        "--n-single=20",
        "--n-many=50",
        "--n-drain=200",
        "--concurrency=1",
        f"--json={out}",
        stdout=StringIO(),
    )
    rows = json.loads(out.read_text())["rows"]
    assert {"enqueue", "drain"} <= {row["workload"] for row in rows}
    assert all(row["values"] and all(v > 0 for v in row["values"]) for row in rows), rows
    assert connections[QUEUE].settings_dict["NAME"] == queue_name
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT datname FROM pg_database WHERE datname IN (%s, %s)",
            [f"{queue_name}_bench", f"{default_name}_bench"],
        )
        assert cursor.fetchall() == []  # the scratch copy of the queue's database is gone
    assert jobs_in(QUEUE) == jobs_in("default") == set()


def test_history_moves_reads_and_replays_on_the_queue_database(
    queue_db, clean_history, run_worker, admin_client
):
    """The mover, get_result, the dashboard and replay from history, with the queue on
    its own database."""
    from django_pgqueue import history
    from django_pgqueue.db import connect
    from django_pgqueue.models import JobHistory
    from django_pgqueue.operations import replay_from_history

    result = add.enqueue(2, 3)
    run_worker(burst=True)
    with connect("test-mover") as conn:
        assert history.move_finished(conn, delay=0).moved == 1
    assert jobs_in(QUEUE) == set()
    assert set(JobHistory.objects.using(QUEUE).values_list("pk", flat=True)) == {int(result.id)}
    assert add.get_result(result.id).return_value == 5
    dashboard = admin_client.get(reverse("admin:django_pgqueue_job_dashboard"))
    counts = {row["stats"].name: row["stats"].counts for row in dashboard.context["queues"]}
    assert counts["default"][Status.SUCCEEDED] == 1
    page = admin_client.get(reverse("admin:django_pgqueue_jobhistory_changelist"))
    assert page.status_code == 200
    assert replay_from_history([int(result.id)]).changed == {int(result.id): "succeeded"}
    assert jobs_in(QUEUE) == {int(result.id)}
