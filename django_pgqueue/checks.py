"""System checks (``manage.py check``). Ids are stable and documented in docs/checks.md."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections, router
from django.db.models import Model

from . import sql
from .docs import check_hint

#: What to put in ``DATABASE_ROUTERS`` when the queue has its own database.
ROUTER_PATH = "django_pgqueue.routers.QueueRouter"


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
                hint=check_hint("django_pgqueue.E001", "Every key and its default is listed."),
                id="django_pgqueue.E001",
            )
        ]
    databases = settings.DATABASES
    if conf.DATABASE not in databases:
        errors.append(
            checks.Error(
                f"PGQUEUE['DATABASE'] is {conf.DATABASE!r}, which is not in DATABASES "
                f"({', '.join(databases) or 'none'}).",
                hint=check_hint(
                    "django_pgqueue.E002", "Set PGQUEUE['DATABASE'] to an alias of DATABASES."
                ),
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
                hint=check_hint(
                    "django_pgqueue.E002",
                    f"Set DATABASES[{conf.DATABASE!r}]['ENGINE'] to "
                    "'django.db.backends.postgresql' (with the NAME, USER, PASSWORD, HOST "
                    "and PORT of a PostgreSQL 13+ server), or point PGQUEUE['DATABASE'] at "
                    "an alias that is one.",
                ),
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
                hint=check_hint(
                    "django_pgqueue.E003",
                    "pip install 'psycopg[binary]' (Django prefers psycopg 3 when installed).",
                ),
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
                hint=check_hint(
                    "django_pgqueue.W001",
                    'Set TASKS = {"default": {"BACKEND": '
                    '"django_pgqueue.backend.PgQueueBackend"}}.',
                ),
                id="django_pgqueue.W001",
            )
        )
    return errors


def _queue_alias() -> str | None:
    """The queue's database alias when it is valid and not ``default`` (else None).

    On ``default`` there is nothing to route. Invalid settings are E001's and
    E002's to report.
    """
    from .conf import validate

    try:
        alias = validate(getattr(settings, "PGQUEUE", None)).DATABASE
    except ImproperlyConfigured:
        return None
    if alias == DEFAULT_DB_ALIAS or alias not in settings.DATABASES:
        return None
    return alias


def _queue_models() -> list[type[Model]]:
    from .routers import APP_LABEL

    return list(apps.get_app_config(APP_LABEL).get_models())


@checks.register(checks.Tags.compatibility)
def check_routing(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E004: with the queue on its own database, Django's routers send its models there."""
    alias = _queue_alias()
    if alias is None:
        return []
    wrong: dict[str, list[str]] = {}
    for model in _queue_models():
        name = model.__name__
        for what, db in (
            ("reads", router.db_for_read(model)),
            ("writes", router.db_for_write(model)),
        ):
            if db != alias:
                wrong.setdefault(f"{what} go to {db!r}", []).append(name)
        if not router.allow_migrate_model(alias, model):
            wrong.setdefault(f"migrate does not create them in {alias!r}", []).append(name)
        if router.allow_migrate_model(DEFAULT_DB_ALIAS, model):
            wrong.setdefault(f"migrate creates them in {DEFAULT_DB_ALIAS!r} too", []).append(name)
    if not wrong:
        return []
    problems = "; ".join(f"{problem} ({', '.join(names)})" for problem, names in wrong.items())
    return [
        checks.Error(
            f"PGQUEUE['DATABASE'] is {alias!r}, but Django's database routers do not keep "
            f"django_pgqueue's models there: {problems}. Django's ORM (Job.objects, the "
            "admin's lists and forms) and migrate would use another database than the one "
            "the queue writes.",
            hint=check_hint(
                "django_pgqueue.E004",
                f"Add {ROUTER_PATH!r} to DATABASE_ROUTERS (before any router that "
                "claims every model).",
            ),
            id="django_pgqueue.E004",
        )
    ]


@checks.register(checks.Tags.database)
def check_tables(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """W002: the queue database has the app's tables (with ``--database`` only).

    A warning, not an error: ``migrate --database <queue>`` runs the checks of
    the database it is about to create the tables in.
    """
    alias = _queue_alias()
    if alias is None or alias not in (databases or ()):
        return []
    tables = [model._meta.db_table for model in _queue_models()]
    with connections[alias].cursor() as cursor:
        cursor.execute(sql.MISSING_TABLES, [tables])
        missing = [row[0] for row in cursor.fetchall()]
    if not missing:
        return []
    return [
        checks.Warning(
            f"The queue database {alias!r} has no {', '.join(missing)} table"
            f"{'s' if len(missing) > 1 else ''}: enqueue, the workers and the admin will fail.",
            hint=check_hint(
                "django_pgqueue.W002",
                f"Run 'manage.py migrate --database {alias} django_pgqueue' (this warning "
                "also shows while that command creates them).",
            ),
            id="django_pgqueue.W002",
        )
    ]


@checks.register(checks.Tags.database)
def check_migration_history(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """E005: the database applied only some of the pre-release migrations the app's
    migration replaces (with ``--database`` and before ``migrate`` only).

    Django then sets the app's migration aside and has none left to run, so
    ``migrate`` would end without a word and leave the schema half built.
    """
    from django.db.migrations.loader import MigrationLoader

    errors: list[checks.CheckMessage] = []
    for alias in databases or ():
        loader = MigrationLoader(connections[alias], ignore_no_migrations=True)
        for key, migration in loader.replacements.items():
            if key[0] != "django_pgqueue" or key in loader.applied_migrations:
                continue
            applied = [step for step in migration.replaces if step in loader.applied_migrations]
            if not applied or len(applied) == len(migration.replaces):
                continue
            last = migration.replaces[-1][1]
            errors.append(
                checks.Error(
                    f"The database {alias!r} applied {len(applied)} of the "
                    f"{len(migration.replaces)} pre-release migrations that {key[1]} "
                    f"replaces (the last: {applied[-1][1]}); migrate would leave its "
                    "tables as they are.",
                    hint=check_hint(
                        "django_pgqueue.E005",
                        f"Migrate it to {last} with the version of django_pgqueue that "
                        "has those migrations, then upgrade.",
                    ),
                    id="django_pgqueue.E005",
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
                    hint=check_hint(
                        "django_pgqueue.E020",
                        "Use the dotted path of a function decorated with @task.",
                    ),
                    id="django_pgqueue.E020",
                )
            )
    for name in sorted(set(decorated) & set(conf.SCHEDULE)):
        errors.append(
            checks.Error(
                f"Schedule {name!r} is declared both in PGQUEUE['SCHEDULE'] and with @periodic "
                f"on {decorated[name].task_path}; the settings' entry would win.",
                hint=check_hint(
                    "django_pgqueue.E021", "Give one of them another name (@periodic(name=...))."
                ),
                id="django_pgqueue.E021",
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
                hint=check_hint("django_pgqueue.E011", "Add 'django_tasks' to INSTALLED_APPS."),
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


@checks.register(checks.Tags.compatibility)
def check_portal(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E030: PORTAL_APPLICATION or PORTAL_PERMISSION does not import to a callable.
    W031: PORTAL_DESTINATIONS opens a kind of URL the endpoint's own check refuses."""
    from django.utils.module_loading import import_string

    from .conf import validate

    try:
        conf = validate(getattr(settings, "PGQUEUE", None))
    except ImproperlyConfigured:
        return []  # E001 reports it
    errors: list[checks.CheckMessage] = []
    for key in ("PORTAL_APPLICATION", "PORTAL_PERMISSION"):
        path = conf.WEBHOOKS[key]
        if path is None:
            continue
        try:
            found = import_string(path)
        except Exception as exc:  # a module failing at import, with whatever error
            problem = f"does not import ({type(exc).__name__}: {exc})"
        else:
            if callable(found):
                continue
            problem = "is not a function"
        errors.append(
            checks.Error(
                f"PGQUEUE['WEBHOOKS'][{key!r}] = {path!r} {problem}.",
                hint=check_hint("django_pgqueue.E030", "Give the dotted path of a function."),
                id="django_pgqueue.E030",
            )
        )
    return errors + _portal_destination_warnings(conf.WEBHOOKS)


def _portal_destination_warnings(conf: Any) -> list[checks.CheckMessage]:
    """W031: a scheme of PORTAL_DESTINATIONS whose every URL Endpoint.clean refuses."""
    from .webhooks.brokers.urls import BROKER_SCHEMES, require_client
    from .webhooks.ssrf import UnsafeURLError

    problems: list[tuple[str, str]] = []
    for scheme in conf["PORTAL_DESTINATIONS"]:
        if scheme == "http" and not conf["ALLOW_HTTP"]:
            problems.append((scheme, "PGQUEUE['WEBHOOKS']['ALLOW_HTTP'] is False"))
        elif scheme in BROKER_SCHEMES:
            try:
                require_client(scheme)
            except UnsafeURLError as exc:
                problems.append((scheme, str(exc)))
    return [
        checks.Warning(
            f"PGQUEUE['WEBHOOKS']['PORTAL_DESTINATIONS'] holds {scheme!r}, but every such "
            f"endpoint URL is refused: {why}",
            hint=check_hint(
                "django_pgqueue.W031", "Remove it from PORTAL_DESTINATIONS, or allow it."
            ),
            id="django_pgqueue.W031",
        )
        for scheme, why in problems
    ]


@checks.register(checks.Tags.compatibility)
def check_api_body_limit(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """W040: the HTTP API's MAX_BODY_BYTES is above Django's DATA_UPLOAD_MAX_MEMORY_SIZE,
    which then refuses the larger bodies first."""
    from .conf import validate

    try:
        limit = validate(getattr(settings, "PGQUEUE", None)).API["MAX_BODY_BYTES"]
    except ImproperlyConfigured:
        return []  # E001 reports it
    django_limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if django_limit is None or limit <= django_limit:
        return []
    return [
        checks.Warning(
            f"PGQUEUE['API']['MAX_BODY_BYTES'] is {limit}, above DATA_UPLOAD_MAX_MEMORY_SIZE "
            f"({django_limit}): bodies between the two are refused (413) by Django's limit.",
            hint=check_hint(
                "django_pgqueue.W040", "Lower MAX_BODY_BYTES or raise DATA_UPLOAD_MAX_MEMORY_SIZE."
            ),
            id="django_pgqueue.W040",
        )
    ]


@checks.register(checks.Tags.compatibility)
def check_history_delay(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """W050: HISTORY_DELAY_SECONDS is shorter than COMPLETION_RETRY_SECONDS (a worker
    checking an ambiguous commit may find its row already moved) or longer than a
    retention (rows would expire in the live table, pruned row by row)."""
    from .conf import validate

    try:
        conf = validate(getattr(settings, "PGQUEUE", None))
    except ImproperlyConfigured:
        return []  # E001 reports it
    delay = conf.HISTORY_DELAY_SECONDS
    if delay is None:
        return []
    problems = []
    if delay < conf.COMPLETION_RETRY_SECONDS:
        problems.append(
            f"PGQUEUE['HISTORY_DELAY_SECONDS'] is {delay:g}, shorter than "
            f"COMPLETION_RETRY_SECONDS ({conf.COMPLETION_RETRY_SECONDS:g}): a worker "
            "checking an ambiguous commit may find its finished row already moved to "
            "history and log it as lost."
        )
    for state, age in conf.RETENTION.items():
        if age is not None and delay >= age:
            problems.append(
                f"PGQUEUE['HISTORY_DELAY_SECONDS'] is {delay:g}, not shorter than "
                f"RETENTION[{state!r}] ({age:g}): such rows expire before they reach "
                "history and are pruned row by row."
            )
    return [
        checks.Warning(
            problem,
            hint=check_hint(
                "django_pgqueue.W050",
                "Keep HISTORY_DELAY_SECONDS between COMPLETION_RETRY_SECONDS and the "
                "shortest retention.",
            ),
            id="django_pgqueue.W050",
        )
        for problem in problems
    ]
