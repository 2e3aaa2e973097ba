"""System checks (``manage.py check``). Ids are stable and documented in docs/checks.md."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured


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
                hint="See docs/settings.md for every key and its default.",
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
def check_schedules(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E020: a schedule's task path does not import to a Task. E021: a schedule name is
    declared both in PGQUEUE['SCHEDULE'] and with @periodic."""
    from .backend import resolve_task
    from .conf import validate
    from .exceptions import NotATask

    try:
        conf = validate(getattr(settings, "PGQUEUE", None))
    except ImproperlyConfigured:
        return []  # E001 reports it (a bad cron expression or time zone among others)
    from .periodic.registry import decorated_schedules

    errors: list[checks.CheckMessage] = []
    decorated = decorated_schedules()
    for name, spec in {**decorated, **conf.SCHEDULE}.items():
        where = (
            f"PGQUEUE['SCHEDULE'][{name!r}]['task']"
            if spec.origin == "settings"
            else (f"@periodic {name!r}")
        )
        try:
            resolve_task(spec.task_path)
        except (ImportError, NotATask) as exc:
            errors.append(
                checks.Error(
                    f"{where} is {spec.task_path!r}, which is not an importable task: {exc}",
                    hint="Use the dotted path of a function decorated with @task.",
                    id="django_pgqueue.E020",
                )
            )
    for name in sorted(set(decorated) & set(conf.SCHEDULE)):
        errors.append(
            checks.Error(
                f"Schedule {name!r} is declared both in PGQUEUE['SCHEDULE'] and with @periodic "
                f"on {decorated[name].task_path}; the settings' entry would win.",
                hint="Give one of them another name (@periodic(name=...)).",
                id="django_pgqueue.E021",
            )
        )
    return errors
