"""Settings of the demo and test project.

The database comes from ``DATABASE_URL`` (``scripts/dev.py`` sets it, starting an
embedded PostgreSQL when none is given).
"""

import json
import os
from pathlib import Path

import dj_database_url

try:  # Django 6.x ships the Tasks framework; 5.2 uses the django-tasks backport.
    import django.tasks  # noqa: F401

    TASKS_APP: list[str] = []
except ImportError:
    TASKS_APP = ["django_tasks"]

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "demo-only-insecure-key-change-me")
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    *TASKS_APP,
    "django_pgqueue",
    "testproject.demo",
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

ROOT_URLCONF = "testproject.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "testproject.wsgi.application"

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/pgqueue_demo")
# Load tests keep task connections open (0 = one connection per task).
CONN_MAX_AGE = int(os.environ.get("DATABASE_CONN_MAX_AGE", "0"))
DATABASES = {
    "default": dj_database_url.parse(DATABASE_URL, conn_max_age=CONN_MAX_AGE),
    # A second database for the queue, on the same server: the tests that move the
    # queue off "default" (PGQUEUE["DATABASE"] = "queue") use it. Its name is
    # default's with "_queue" appended, so a worker subprocess given the test
    # database's URL finds the test queue database too (test_<name>_queue).
    "queue": dj_database_url.parse(
        os.environ.get("QUEUE_DATABASE_URL", "") or DATABASE_URL, conn_max_age=CONN_MAX_AGE
    ),
}
if not os.environ.get("QUEUE_DATABASE_URL"):
    DATABASES["queue"]["NAME"] = f"{DATABASES['default']['NAME']}_queue"
# The queue on the second database (PGQUEUE_DATABASE=queue): the router keeps the
# queue's models there, as a project that moves its queue out does.
QUEUE_ALIAS = os.environ.get("PGQUEUE_DATABASE", "default")
DATABASE_ROUTERS = [] if QUEUE_ALIAS == "default" else ["django_pgqueue.routers.QueueRouter"]
# Behind PgBouncer in transaction mode (fault tests set this): no server-side cursors.
if os.environ.get("DATABASE_DISABLE_SERVER_SIDE_CURSORS", "") == "1":
    for alias in DATABASES:
        DATABASES[alias]["DISABLE_SERVER_SIDE_CURSORS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"

TASKS = {
    "default": {
        "BACKEND": "django_pgqueue.backend.PgQueueBackend",
        "QUEUES": [],
        # Short backoff so the demo's retries happen within seconds; the package
        # defaults are 2 s doubling up to an hour.
        "OPTIONS": {"MAX_ATTEMPTS": 5, "BACKOFF_BASE": 0.25, "BACKOFF_CAP": 2.0},
    }
}

#: The demo's periodic tasks, on only where the demo asks for them (pgqueue_demo_server
#: sets PGQUEUE_DEMO_SCHEDULE=1): test workers must not enqueue jobs of their own.
#: testproject/demo/periodic.py declares one more with @periodic.
DEMO_SCHEDULE: dict[str, dict] = {}
if os.environ.get("PGQUEUE_DEMO_SCHEDULE", "") == "1":
    DEMO_SCHEDULE = {
        "demo-nightly-report": {
            "task": "testproject.demo.periodic.nightly_report",
            "cron": "0 3 * * *",
            "timezone": "Europe/Paris",
            "queue_name": "default",
        },
    }

PGQUEUE = {
    "DATABASE": QUEUE_ALIAS,
    "LEASE_SECONDS": float(os.environ.get("PGQUEUE_LEASE_SECONDS", "30")),
    "POLL_INTERVAL": float(os.environ.get("PGQUEUE_POLL_INTERVAL", "1.0")),
    "TEST_HOOKS": os.environ.get("PGQUEUE_TEST_HOOKS", "") == "1",
    # The suite reads per-attempt lines; production's default is "summary".
    "JOB_LOG": os.environ.get("PGQUEUE_JOB_LOG", "each"),
    # Knobs the fault-injection tests turn for their worker subprocesses; the
    # defaults are the library's own.
    "NOTIFY": os.environ.get("PGQUEUE_NOTIFY", "1") == "1",
    "LISTEN_DSN": os.environ.get("PGQUEUE_LISTEN_DSN") or None,
    "LISTEN_HEALTH_INTERVAL": float(os.environ.get("PGQUEUE_LISTEN_HEALTH_INTERVAL", "10")),
    "COMPLETION_RETRY_SECONDS": float(os.environ.get("PGQUEUE_COMPLETION_RETRY_SECONDS", "10")),
    "PREPARED_STATEMENTS": os.environ.get("PGQUEUE_PREPARED_STATEMENTS", "1") == "1",
    "UNKNOWN_TASK_DELAY": float(os.environ.get("PGQUEUE_UNKNOWN_TASK_DELAY", "60")),
    "SHUTDOWN_GRACE_SECONDS": float(os.environ.get("PGQUEUE_SHUTDOWN_GRACE_SECONDS", "30")),
    # The job history's mover (docs/operations.md, "History and retention"); "none"
    # keeps finished jobs in pgqueue_job.
    "HISTORY_DELAY_SECONDS": (
        None
        if os.environ.get("PGQUEUE_HISTORY_DELAY_SECONDS") == "none"
        else float(os.environ.get("PGQUEUE_HISTORY_DELAY_SECONDS", "30"))
    ),
    "MAINTENANCE_INTERVAL": float(os.environ.get("PGQUEUE_MAINTENANCE_INTERVAL", "10")),
    # Periodic tasks: the demo's own, or the ones a test hands its worker processes.
    "SCHEDULE": json.loads(os.environ.get("PGQUEUE_TEST_SCHEDULE", "null")) or DEMO_SCHEDULE,
    "SCHEDULER_INTERVAL": float(os.environ.get("PGQUEUE_SCHEDULER_INTERVAL", "2.0")),
    # Flow control defaults the tests hand their worker processes.
    "QUEUES": json.loads(os.environ.get("PGQUEUE_TEST_QUEUES", "{}")),
    "WEBHOOKS": {
        # The demo's receivers listen on 127.0.0.1; production keeps this empty.
        "ALLOW_NETWORKS": ["127.0.0.0/8"],
        "ALLOW_HTTP": True,
        "MAX_IN_FLIGHT": int(os.environ["PGQUEUE_WEBHOOK_MAX_IN_FLIGHT"])
        if os.environ.get("PGQUEUE_WEBHOOK_MAX_IN_FLIGHT")
        else None,
        # The customer portal at /webhooks/: who the logged-in customer is.
        "PORTAL_APPLICATION": "testproject.demo.portal.current_application",
        # Delivery settings a test hands its worker processes (retries, breaker).
        **json.loads(os.environ.get("PGQUEUE_TEST_WEBHOOKS", "{}")),
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "django_pgqueue": {
            "handlers": ["console"],
            "level": os.environ.get("PGQUEUE_LOG_LEVEL", "WARNING"),
        },
        # The worker logs each attempt itself, a failure with its traceback; the Tasks
        # framework's own record of the same failure would print every traceback twice.
        "django.tasks": {"handlers": ["console"], "level": "CRITICAL", "propagate": False},
        "django_tasks": {"handlers": ["console"], "level": "CRITICAL", "propagate": False},
    },
}
