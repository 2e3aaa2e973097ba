"""``GET /jobs/{id}``: a job's state, progress and outcome at the HTTP door, read
through the job store's one read (the read of ``get_result``), live or in the
history; for operators' keys only."""

from __future__ import annotations

import pytest

from django_pgqueue import history, testing
from django_pgqueue.api.keys import create_key
from django_pgqueue.db import connect
from django_pgqueue.models import ApiKey, Application, Job, JobHistory
from testproject.demo import tasks
from testproject.demo.models import TaskRun

from ..conftest import wait_for
from .conftest import problem_of

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_job_reads_pending_then_succeeded_with_its_result(api, run_worker):
    client = api("jobs")
    result = tasks.add.enqueue(2, 3)
    pending = client.get(f"jobs/{result.id}")
    assert pending.status_code == 200, pending.content
    body = pending.json()
    assert body["id"] == int(result.id) and body["task"] == "testproject.demo.tasks.add"
    assert (body["status"], body["attempts"], body["max_attempts"]) == ("pending", 0, 5)
    assert body["queue"] == "default" and body["priority"] == 0
    assert body["progress"] is None and body["result"] is None and body["error"] is None
    assert body["created_at"] and body["started_at"] is None and body["finished_at"] is None
    run_worker(burst=True)
    done = client.get(f"jobs/{result.id}").json()
    assert (done["status"], done["attempts"], done["result"], done["error"]) == (
        "succeeded",
        1,
        5,
        None,
    )
    assert done["started_at"] and done["finished_at"] and done["last_attempted_at"]


def test_progress_is_visible_while_the_job_runs(api, run_worker):
    client = api("jobs")
    result = tasks.report_and_wait.enqueue(0.4, "4 of 10 pages")
    run_worker(burst=False)

    def running():
        body = client.get(f"jobs/{result.id}").json()
        return body if body["status"] == "in_progress" and body["progress"] else None

    body = wait_for(running, 30, "the running job's progress at GET /jobs/{id}")
    assert body["progress"]["fraction"] == 0.4
    assert body["progress"]["message"] == "4 of 10 pages"
    assert body["progress"]["at"] and body["attempts"] == 1 and body["result"] is None
    TaskRun.objects.create(job_id=0, attempt=0, pid=0, label=f"release {result.id}")
    done = wait_for(
        lambda: (b := client.get(f"jobs/{result.id}").json())["status"] == "succeeded" and b,
        30,
        "the job to succeed",
    )
    assert done["result"] == "released" and done["progress"]["fraction"] == 0.4


def test_a_failed_attempt_shows_its_error_and_a_dead_job_its_last(api):
    client = api("jobs")
    result = tasks.always_fails.enqueue(7)
    # Its retry stays scheduled. (On a loaded machine the helper's drain can outlast
    # a jittered backoff from the test settings' 0.25 s, and then runs the retry
    # too: the API shows whichever attempt the row holds.)
    testing.run_queued_jobs(retries="wait")
    failed = client.get(f"jobs/{result.id}").json()
    attempts = Job.objects.get(pk=int(result.id)).attempts
    assert (failed["status"], failed["attempts"], failed["max_attempts"]) == (
        "failed",
        attempts,
        3,
    )
    assert attempts in (1, 2)
    assert failed["error"]["exception_class_path"] == "builtins.ValueError"
    assert "order 7 has an invalid address" in failed["error"]["traceback"]
    assert failed["result"] is None and failed["finished_at"] is None
    testing.run_queued_jobs(retries="now")
    dead = client.get(f"jobs/{result.id}").json()
    assert (dead["status"], dead["attempts"]) == ("dead", 3)
    assert dead["error"]["exception_class_path"] == "builtins.ValueError"
    assert dead["finished_at"] is not None


@pytest.mark.usefixtures("clean_history")
def test_a_job_is_found_after_it_moved_to_the_history(api, run_worker):
    client = api("jobs")
    result = tasks.add.enqueue(20, 22)
    run_worker(burst=True)
    live = client.get(f"jobs/{result.id}").json()
    with connect("test-mover") as conn:
        assert history.move_finished(conn, delay=0).moved == 1
    assert not Job.objects.filter(pk=int(result.id)).exists()
    assert JobHistory.objects.filter(pk=int(result.id)).exists()
    moved = client.get(f"jobs/{result.id}")
    assert moved.status_code == 200, moved.content
    assert moved.json() == live and moved.json()["result"] == 42


@pytest.mark.parametrize(
    "pk", ["999999", "0", "-1", "abc", "1.5", "1e3", "%C2%B2", "99999999999999999999", "+1"]
)
def test_an_id_no_job_has_is_a_problem_404(api, pk):
    tasks.add.enqueue(1, 1)
    problem = problem_of(api("jobs").get(f"jobs/{pk}"), 404)
    assert problem["code"] == "not_found" and "No " in problem["detail"]


def test_a_nul_in_the_id_is_a_problem_400(api):
    assert problem_of(api("jobs").get("jobs/1%002"), 400)["code"] == "invalid_parameter"


def test_a_key_without_the_jobs_scope_is_refused_naming_it(api):
    result = tasks.add.enqueue(1, 1)
    problem = problem_of(api("read", "manage", "queues").get(f"jobs/{result.id}"), 403)
    assert "lacks the 'jobs' scope" in problem["detail"]
    problem_of(api("jobs").post(f"jobs/{result.id}"), 405)


def test_a_key_bound_to_an_application_never_reads_a_job(api):
    result = tasks.add.enqueue(1, 1)
    Application.objects.create(uid="cust_a")
    customer = api("read", "manage", "send", "secrets", application="cust_a")
    problem = problem_of(customer.get(f"jobs/{result.id}"), 403)
    assert "'jobs' scope is for operators only" in problem["detail"]
    # A key bound to an application holding the scope anyway (written by hand, or
    # bound after it was made) is refused all the same.
    key = create_key("legacy", ["jobs"])
    ApiKey.objects.filter(pk=key.api_key.pk).update(
        application=Application.objects.get(uid="cust_a")
    )
    from .conftest import ApiClient

    problem = problem_of(ApiClient(key.key).get(f"jobs/{result.id}"), 403)
    assert "'jobs' scope is for operators only" in problem["detail"]
    assert b"testproject" not in customer.get(f"jobs/{result.id}").content


def test_a_job_whose_stored_json_python_cannot_decode_reads_naming_it(api):
    """A row written past the doors: a succeeded job's result and a dead job's error
    log nested beyond Python's recursion limit. Each reads, the bad value named."""
    from django.db import connection

    from django_pgqueue.error_history import NOT_READABLE as NOT_DECODABLE

    deep = "(repeat('[', 5000) || repeat(']', 5000))::jsonb"
    done = tasks.add.enqueue(1, 2)
    dead = tasks.add.enqueue(1, 3)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgqueue_job SET status = 'succeeded', finished_at = now(),"
            f" result = {deep} WHERE id = %s",
            [int(done.id)],
        )
        cursor.execute(
            "UPDATE pgqueue_job SET status = 'dead', finished_at = now(),"
            f" errors = {deep} WHERE id = %s",
            [int(dead.id)],
        )
    client = api("jobs")
    succeeded = client.get(f"jobs/{done.id}")
    assert succeeded.status_code == 200, succeeded.content
    assert succeeded.json()["result"].startswith("(stored JSON Python cannot decode: Recursion")
    failed = client.get(f"jobs/{dead.id}")
    assert failed.status_code == 200, failed.content
    error = failed.json()["error"]
    assert error["exception_class_path"] == NOT_DECODABLE
    assert "RecursionError" in error["traceback"]


@pytest.mark.parametrize(
    ("stored", "named"),
    [
        ("42", "not a list: 42"),
        ('"x"', "the stored error history"),  # a JSON string: decoded or not, named
        ('{"a": 1}', 'not a list: {"a": 1}'),
        ("[1]", "error entry 0 is not an object: 1"),
    ],
)
def test_a_job_whose_error_history_is_no_list_of_entries_reads_naming_it(api, stored, named):
    """A row written past the worker, whose error history is not a list of objects:
    every door reads the job, the history's problem shown as its last error, where
    each used to raise (a 500 here and in the admin, a TypeError from get_result)."""
    from django.db import connection

    from django_pgqueue.error_history import NOT_READABLE

    dead = tasks.add.enqueue(1, 3)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgqueue_job SET status = 'dead', finished_at = now(),"
            " errors = %s::jsonb WHERE id = %s",
            [stored, int(dead.id)],
        )
    failed = api("jobs").get(f"jobs/{dead.id}")
    assert failed.status_code == 200, failed.content
    error = failed.json()["error"]
    assert error["exception_class_path"] == NOT_READABLE and named in error["traceback"]
    (entry,) = tasks.add.get_result(dead.id).errors
    assert entry.exception_class_path == NOT_READABLE and named in entry.traceback
