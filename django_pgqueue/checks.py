"""System checks (``manage.py check``). Ids are stable and documented in docs/checks.md."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from .docs import docs_url


@checks.register(checks.Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E001: PGQUEUE is valid. E002: the queue database exists and is PostgreSQL.
    E003: psycopg 3 is the driver. W001: TASKS has no PgQueueBackend."""
    from .conf import validate

    errors: list[checks.CheckMessage] = []
    try:
        conf = validate(getattr(settings, "PGQUEUE", None))
    except ImproperlyConfigured as exc:
        return [
            checks.Error(
                str(exc),
                hint=f"Every key and its default: {docs_url('settings')}",
                id="django_pgqueue.E001",
            )
        ]
    databases = settings.DATABASES
    if conf.DATABASE not in databases:
        errors.append(
            checks.Error(
                f"PGQUEUE['DATABASE'] is {conf.DATABASE!r}, which is not in DATABASES "
                f"({', '.join(databases) or 'none'}).",
                id="django_pgqueue.E002",
            )
        )
        return errors
    engine = databases[conf.DATABASE].get("ENGINE", "")
    if engine != "django.db.backends.postgresql" and not engine.endswith(".postgresql"):
        errors.append(
            checks.Error(
                f"The queue database {conf.DATABASE!r} uses {engine or 'no ENGINE'}; "
                f"django_pgqueue needs PostgreSQL (SKIP LOCKED, LISTEN/NOTIFY, jsonb).",
                hint="Point PGQUEUE['DATABASE'] at a 'django.db.backends.postgresql' database.",
                id="django_pgqueue.E002",
            )
        )
        return errors
    try:
        from django.db.backends.postgresql.psycopg_any import is_psycopg3
    except ImportError:  # pragma: no cover - no driver at all
        is_psycopg3 = False
    if not is_psycopg3:
        errors.append(
            checks.Error(
                "Django is using psycopg2 for PostgreSQL; django_pgqueue needs psycopg 3.",
                hint="pip install 'psycopg[binary]' (Django prefers psycopg 3 when installed).",
                id="django_pgqueue.E003",
            )
        )
    tasks = getattr(settings, "TASKS", {}) or {}
    ours = [
        alias
        for alias, params in tasks.items()
        if isinstance(params, dict)
        and params.get("BACKEND") == "django_pgqueue.backend.PgQueueBackend"
    ]
    if not ours:
        errors.append(
            checks.Warning(
                "No TASKS backend is django_pgqueue.backend.PgQueueBackend, so @task "
                "functions will not be stored in the queue.",
                hint='Set TASKS = {"default": {"BACKEND": '
                '"django_pgqueue.backend.PgQueueBackend"}}.',
                id="django_pgqueue.W001",
            )
        )
    return errors


@checks.register(checks.Tags.compatibility)
def check_task_backends(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E010: every PgQueueBackend's OPTIONS are valid, whether or not the Tasks
    framework registered its own check. E011: on Django 5.2, the backport is installed.

    Django 6 registers the check that asks each backend for its messages when
    ``django.tasks`` is first imported, and the backport registers it in its app's
    ``ready()``: a project that imports neither before ``manage.py check`` (or does not
    install the backport's app) would hear nothing until ``enqueue()`` failed. When the
    framework's check is registered this one stays silent, so nothing is said twice.
    """
    import django
    from django.apps import apps

    # Decided before anything imports the framework: importing django.tasks registers
    # its check, too late to run in this pass.
    framework = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
    framework_checks = _framework_checks_registered(f"{framework}.checks")
    errors: list[checks.CheckMessage] = []
    if framework == "django_tasks" and not apps.is_installed("django_tasks"):
        errors.append(
            checks.Error(
                "On Django 5.2 the Tasks framework is the django-tasks backport, and "
                "'django_tasks' is not in INSTALLED_APPS: its system checks and the signal "
                "receivers that log each task are not set up.",
                hint=f"Add 'django_tasks' to INSTALLED_APPS. {docs_url('quickstart')}",
                id="django_pgqueue.E011",
            )
        )
    if framework_checks:
        return errors
    from .backend import PgQueueBackend

    for alias, params in (getattr(settings, "TASKS", {}) or {}).items():
        if isinstance(params, dict) and params.get("BACKEND") == PGQUEUE_BACKEND:
            errors.extend(PgQueueBackend(alias, params).check())
    return errors


#: The dotted path of our Tasks backend, as it appears in ``TASKS``.
PGQUEUE_BACKEND = "django_pgqueue.backend.PgQueueBackend"


def _framework_checks_registered(module: str) -> bool:
    registered = checks.registry.registry.registered_checks
    return any(getattr(check, "__module__", None) == module for check in registered)
