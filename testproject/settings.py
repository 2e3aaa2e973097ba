"""Settings of the demo and test project.

The database comes from ``DATABASE_URL`` (``scripts/dev.py`` sets it, starting an
embedded PostgreSQL when none is given).
"""

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

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/pgqueue_demo"),
        # Load tests keep task connections open (0 = one connection per task).
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "0")),
    )
}
# Behind PgBouncer in transaction mode (fault tests set this): no server-side cursors.
if os.environ.get("DATABASE_DISABLE_SERVER_SIDE_CURSORS", "") == "1":
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
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

PGQUEUE = {
    "LEASE_SECONDS": float(os.environ.get("PGQUEUE_LEASE_SECONDS", "30")),
    "POLL_INTERVAL": float(os.environ.get("PGQUEUE_POLL_INTERVAL", "1.0")),
    "TEST_HOOKS": os.environ.get("PGQUEUE_TEST_HOOKS", "") == "1",
    # Knobs the fault-injection tests turn for their worker subprocesses; the
    # defaults are the library's own.
    "NOTIFY": os.environ.get("PGQUEUE_NOTIFY", "1") == "1",
    "LISTEN_DSN": os.environ.get("PGQUEUE_LISTEN_DSN") or None,
    "LISTEN_HEALTH_INTERVAL": float(os.environ.get("PGQUEUE_LISTEN_HEALTH_INTERVAL", "10")),
    "COMPLETION_RETRY_SECONDS": float(os.environ.get("PGQUEUE_COMPLETION_RETRY_SECONDS", "10")),
    "PREPARED_STATEMENTS": os.environ.get("PGQUEUE_PREPARED_STATEMENTS", "1") == "1",
    "UNKNOWN_TASK_DELAY": float(os.environ.get("PGQUEUE_UNKNOWN_TASK_DELAY", "60")),
    "SHUTDOWN_GRACE_SECONDS": float(os.environ.get("PGQUEUE_SHUTDOWN_GRACE_SECONDS", "30")),
    "WEBHOOKS": {
        # The demo's receivers listen on 127.0.0.1; production keeps this empty.
        "ALLOW_NETWORKS": ["127.0.0.0/8"],
        "ALLOW_HTTP": True,
        "MAX_IN_FLIGHT": int(os.environ["PGQUEUE_WEBHOOK_MAX_IN_FLIGHT"])
        if os.environ.get("PGQUEUE_WEBHOOK_MAX_IN_FLIGHT")
        else None,
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
        "django.tasks": {"handlers": ["console"], "level": "WARNING", "propagate": False},
        "django_tasks": {"handlers": ["console"], "level": "WARNING", "propagate": False},
    },
}
