"""A project as `startproject` makes it, plus the quickstart's settings: what a new user
sees from `manage.py check` and from a worker with no LOGGING setting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ..conftest import REPO, database_url

pytestmark = pytest.mark.django_db(transaction=True)

SETTINGS = """
import django
SECRET_KEY = "fresh-project"
DEBUG = False
ALLOWED_HOSTS = []
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    *([] if django.VERSION >= (6, 0) else ["django_tasks"]),
    "django_pgqueue",
    "freshapp",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "freshurls"
TEMPLATES = [{{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {{"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]}},
}}]
DATABASES = {{"default": {{
    "ENGINE": "django.db.backends.postgresql", "NAME": {name!r}, "USER": {user!r},
    "PASSWORD": {password!r}, "HOST": {host!r}, "PORT": {port!r},
}}}}
USE_TZ = True
STATIC_URL = "static/"
TASKS = {{"default": {{
    "BACKEND": "django_pgqueue.backend.PgQueueBackend",
    "OPTIONS": {options!r},
}}}}
PGQUEUE = {{"POLL_INTERVAL": 0.1}}
"""

MANAGE_PY = """
import sys

from django.core.management import execute_from_command_line

execute_from_command_line(sys.argv)
"""

TASKS_MODULE = """
from django_pgqueue import task


@task(max_attempts=1)
def greet(name):
    return f"hello {name}"


@task(max_attempts=1)
def explode():
    raise ValueError("kaboom from a task")
"""


@pytest.fixture
def fresh_project(tmp_path: Path):
    """Write a fresh project into tmp_path; returns a function running manage.py there."""
    from django.db import connection

    def make(options: dict | None = None):
        s = connection.settings_dict
        (tmp_path / "freshsettings.py").write_text(
            SETTINGS.format(
                name=s["NAME"],
                user=s.get("USER") or "",
                password=s.get("PASSWORD") or "",
                host=s.get("HOST") or "",
                port=str(s.get("PORT") or ""),
                options=options or {},
            )
        )
        (tmp_path / "freshurls.py").write_text("urlpatterns = []\n")
        app = tmp_path / "freshapp"
        app.mkdir(exist_ok=True)
        (app / "__init__.py").write_text("")
        (app / "tasks.py").write_text(TASKS_MODULE)
        (tmp_path / "manage.py").write_text(MANAGE_PY)
        return run

    def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            manage(*args), cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=timeout
        )

    def env() -> dict[str, str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PGQUEUE"))}
        clean["DJANGO_SETTINGS_MODULE"] = "freshsettings"
        clean["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO)])
        clean["PYTHONUNBUFFERED"] = "1"
        return clean

    def manage(*args: str) -> list[str]:
        return [sys.executable, str(tmp_path / "manage.py"), *args]

    run.env = env  # type: ignore[attr-defined]
    run.manage = manage  # type: ignore[attr-defined]
    run.root = tmp_path  # type: ignore[attr-defined]

    assert database_url()  # the test database exists
    return make


def test_check_reports_a_bad_options_key_once(fresh_project):
    run = fresh_project({"MAX_ATTEMPT": 5, "BACKOFF_BASE": -1})
    result = run("check")
    assert result.returncode != 0
    assert result.stderr.count("django_pgqueue.E010") == 2, result.stderr
    assert "MAX_ATTEMPT" in result.stderr and "BACKOFF_BASE" in result.stderr


def test_check_is_clean_on_the_quickstart_settings(fresh_project):
    run = fresh_project()
    result = run("check")
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def _enqueue(run, *names: str) -> None:
    calls = {"greet": "greet.enqueue('ada')", "explode": "explode.enqueue()"}
    code = "from freshapp.tasks import greet, explode\n" + "\n".join(calls[n] for n in names)
    result = run("shell", "-c", code)
    assert result.returncode == 0, result.stderr


def _log_each_attempt(tmp_path):
    """PGQUEUE["JOB_LOG"] = "each": a line per attempt (the default is a summary)."""
    settings = tmp_path / "freshsettings.py"
    settings.write_text(
        settings.read_text() + '\nPGQUEUE = {**globals().get("PGQUEUE", {}), "JOB_LOG": "each"}\n'
    )


def test_a_worker_without_logging_settings_prints_failures_and_a_summary(fresh_project):
    run = fresh_project()
    _enqueue(run, "greet", "explode")
    result = run("runworkers", "--burst")
    assert result.returncode == 0, result.stderr
    out = result.stderr
    assert "starting" in out
    # A failure has its own line with its traceback; successes are counted.
    assert "freshapp.tasks.explode" in out and "outcome=dead" in out
    assert "ValueError: kaboom from a task" in out and "Traceback" in out
    assert "freshapp.tasks.greet" not in out
    assert "2 attempt(s)" in out and "succeeded=1" in out and "dead=1" in out


def test_with_job_log_each_a_worker_prints_a_line_per_attempt(fresh_project, tmp_path):
    run = fresh_project()
    _log_each_attempt(tmp_path)
    _enqueue(run, "greet", "explode")
    result = run("runworkers", "--burst")
    assert result.returncode == 0, result.stderr
    out = result.stderr
    assert "freshapp.tasks.greet" in out and "outcome=succeeded" in out
    assert "freshapp.tasks.explode" in out and "outcome=dead" in out


def test_with_debug_on_each_attempt_is_logged_once(fresh_project, tmp_path):
    # startproject turns DEBUG on, and Django's console handler then prints the Tasks
    # framework's own started/finished records beside the worker's line per attempt.
    run = fresh_project()
    _log_each_attempt(tmp_path)
    settings = tmp_path / "freshsettings.py"
    settings.write_text(settings.read_text() + "\nDEBUG = True\n")
    _enqueue(run, "greet", "explode")
    result = run("runworkers", "--burst")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len([line for line in lines if "freshapp.tasks.greet" in line]) == 1, result.stderr
    assert len([line for line in lines if "freshapp.tasks.explode" in line]) == 1, result.stderr
    assert result.stderr.count("Traceback") == 1, result.stderr
    assert result.stderr.count("ValueError: kaboom from a task") == 1, result.stderr


def test_verbosity_zero_prints_errors_only(fresh_project):
    run = fresh_project()
    _enqueue(run, "greet", "explode")
    result = run("runworkers", "--burst", "-v", "0")
    assert result.returncode == 0, result.stderr
    assert "starting" not in result.stderr and "freshapp.tasks.greet" not in result.stderr
    assert "kaboom from a task" in result.stderr


def test_json_log_lines_have_stable_fields(fresh_project, tmp_path):
    import json

    run = fresh_project()
    _log_each_attempt(tmp_path)
    _enqueue(run, "greet")
    result = run("runworkers", "--burst", "--log-format", "json")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    [attempt] = [r for r in records if r.get("event") == "attempt"]
    assert attempt["task"] == "freshapp.tasks.greet"
    assert attempt["outcome"] == "succeeded" and attempt["attempt"] == 1
    assert {"time", "level", "logger", "message", "job_id", "duration", "worker_id"} <= set(attempt)
    assert any(r.get("event") == "worker_started" for r in records)


def test_a_project_configured_handler_is_left_alone(fresh_project, tmp_path):
    run = fresh_project()
    settings = tmp_path / "freshsettings.py"
    settings.write_text(
        settings.read_text()
        + textwrap.dedent(
            """
            LOGGING = {
                "version": 1,
                "handlers": {"null": {"class": "logging.NullHandler"}},
                "loggers": {"django_pgqueue": {"handlers": ["null"], "propagate": False}},
            }
            """
        )
    )
    _enqueue(run, "greet")
    result = run("runworkers", "--burst")
    assert result.returncode == 0, result.stderr
    assert "freshapp.tasks.greet" not in result.stderr


def test_reload_restarts_the_worker_on_new_code(fresh_project):
    import signal
    import threading
    import time

    from django_pgqueue.models import Job

    run = fresh_project()
    proc = subprocess.Popen(
        run.manage("runworkers", "--reload"),
        cwd=run.root,
        env=run.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()

    def wait(predicate, what: str, timeout: float = 45):
        deadline = time.monotonic() + timeout
        while not predicate():
            assert proc.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, f"timed out waiting for {what}:\n" + "".join(lines)
            time.sleep(0.1)

    try:
        wait(lambda: sum("starting" in line for line in lines) == 1, "the first start")
        _enqueue(run, "greet")
        wait(lambda: Job.objects.filter(result="hello ada").exists(), "the old code's result")
        time.sleep(1.2)  # the file's new mtime must differ from the one the reloader saw
        tasks = run.root / "freshapp" / "tasks.py"
        tasks.write_text(TASKS_MODULE.replace('f"hello {name}"', 'f"hi {name}"'))
        wait(lambda: any("changed: stopping worker" in line for line in lines), "the reload")
        wait(lambda: sum("starting" in line for line in lines) == 2, "the second start")
        _enqueue(run, "greet")
        wait(lambda: Job.objects.filter(result="hi ada").exists(), "the new code's result")
        assert "stopped" in "".join(lines)  # the old worker drained, it was not killed
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        reader.join(5)
        proc.stderr.close()


def _quickstart_line(needle: str) -> str:
    """The one line of docs/quickstart.md holding ``needle``, as a reader copies it."""
    lines = (REPO / "docs" / "quickstart.md").read_text().splitlines()
    [found] = [line for line in lines if needle in line]
    return found


def test_the_quickstart_webhook_step_reaches_a_local_receiver(fresh_project):
    """Step 6 as written: the SSRF allowances it shows for a receiver on 127.0.0.1, an
    endpoint made with ``Endpoint.objects.create(url=...)``, whose ``endpoint.secret``
    the receiver verifies with, and ``send_event``; a worker delivers it signed."""
    from testproject.demo import receivers

    from ..support.receiver import Receiver

    run = fresh_project()
    allowances = _quickstart_line('"ALLOW_NETWORKS"').split("#")[0].strip()
    assert allowances.startswith("PGQUEUE = ")
    settings = run.root / "freshsettings.py"
    settings.write_text(
        settings.read_text()
        + "\nPOLL = PGQUEUE\n"
        + allowances
        + '\nPGQUEUE = {**POLL, **PGQUEUE, "WEBHOOKS": {**PGQUEUE["WEBHOOKS"], '
        '"RETRY_SCHEDULE": [0]}}\n'
    )
    send = _quickstart_line("send_event(").strip()
    secret_line = _quickstart_line("endpoint.secret").split("#")[0].strip()
    with Receiver() as receiver:
        secrets: list[str] = []
        receiver.routes["/hooks"] = receivers.verifying(lambda: secrets[0])
        code = (
            "from django_pgqueue import send_event\n"
            "from django_pgqueue.models import Endpoint\n"
            f"endpoint = Endpoint.objects.create(url={receiver.url('/hooks')!r})\n"
            f"print('SECRET', {secret_line})\n"
            f"{send}\n"
        )
        made = run("shell", "-c", code)
        assert made.returncode == 0, made.stderr
        printed = made.stdout.splitlines()
        [secret] = [line.split()[1] for line in printed if line.startswith("SECRET")]
        assert secret.startswith("whsec_")
        secrets.append(secret)
        worked = run("runworkers", "--until-empty", "--max-time", "30")
        assert worked.returncode == 0, worked.stderr
        receiver.settle()
        [request] = receiver.hits("/hooks")
    assert request.verified is True
    assert json.loads(request.body)["type"] == "order.paid"


@pytest.fixture
def empty_database():
    """A database with no table at all (``migrate`` never ran), dropped afterwards."""
    import psycopg
    from django.db import connection

    name = f"{connection.settings_dict['NAME']}_unmigrated"[:63]
    with psycopg.connect(database_url(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    yield name
    with psycopg.connect(database_url(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_worker_on_a_database_never_migrated_says_to_migrate(fresh_project, empty_database):
    """Forgetting `manage.py migrate` made a worker print a traceback per claim
    ("relation pgqueue_job does not exist") and retry for ever, even with --burst.
    It now stops at once and says which command to run."""
    from django.db import connection
    from django.db.migrations.loader import MigrationLoader

    run = fresh_project()
    settings = run.root / "freshsettings.py"
    current = repr(connection.settings_dict["NAME"])
    settings.write_text(settings.read_text().replace(current, repr(empty_database), 1))
    result = run("runworkers", "--burst", timeout=30)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "relation" not in result.stderr
    names = sorted(
        name
        for app, name in MigrationLoader(None, ignore_no_migrations=True).disk_migrations
        if app == "django_pgqueue"
    )
    assert (
        f"The database 'default' ({empty_database}) lacks django_pgqueue's tables: "
        f"its migrations are not applied ({names[0]} ... {names[-1]}, {len(names)} in all)"
    ) in result.stderr
    assert "Run `python manage.py migrate` first." in result.stderr


def test_a_worker_only_project_without_auth_checks_clean_and_runs_jobs(fresh_project):
    """A service that only runs workers need not install the admin, auth or sessions:
    the checks must not import the portal's views (which need django.contrib.auth)."""
    run = fresh_project()
    settings = run.root / "freshsettings.py"
    settings.write_text(
        settings.read_text()
        + "\nINSTALLED_APPS = [*([] if django.VERSION >= (6, 0) else ['django_tasks']),"
        " 'django_pgqueue', 'freshapp']\nMIDDLEWARE = []\nTEMPLATES = []\n"
    )
    result = run("check")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    _enqueue(run, "greet")
    result = run("runworkers", "--burst")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
