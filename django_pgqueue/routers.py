"""A database router that keeps the queue's tables on ``PGQUEUE["DATABASE"]``.

The queue's own statements (enqueue, the worker's claims and completions, the
admin's operations, prune, stats) already name ``PGQUEUE["DATABASE"]``. Django's
ORM does not know that setting: ``Job.objects``, the admin's changelists and
forms, and ``migrate`` ask the routers in ``DATABASE_ROUTERS``. This router
answers for the app's models, and only for them::

    DATABASE_ROUTERS = ["django_pgqueue.routers.QueueRouter"]

Every other model gets no opinion (``None``), so the next router, or Django's
default of the ``default`` database, decides. That is how the admin keeps
working across the two databases: users, groups, permissions and content types
(including the queue models' own content types and permissions, created by
``migrate`` on ``default``) stay in ``default``, and so does the admin's audit
log, whose ``LogEntry`` refers to a queue row by its content type and its id as
text, never by a foreign key into the queue database.

The alias is read on every call, so ``override_settings(PGQUEUE=...)`` and the
default (``"default"``, where the router changes nothing) both hold.

The price of a separate database is atomicity with the caller's data:
:func:`warn_if_outside_queue_transaction` says so where it happens.
"""

from __future__ import annotations

import warnings
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, models

from .conf import get_settings
from .exceptions import CrossDatabaseEnqueueWarning

#: The app label whose models this router places.
APP_LABEL = "django_pgqueue"


def _is_ours(model: type[models.Model] | models.Model) -> bool:
    return model._meta.app_label == APP_LABEL


class QueueRouter:
    """Reads, writes and migrations of django_pgqueue's models go to the queue database."""

    def db_for_read(self, model: type[models.Model], **hints: Any) -> str | None:
        return get_settings().DATABASE if _is_ours(model) else None

    def db_for_write(self, model: type[models.Model], **hints: Any) -> str | None:
        return get_settings().DATABASE if _is_ours(model) else None

    def allow_relation(self, obj1: models.Model, obj2: models.Model, **hints: Any) -> bool | None:
        # Endpoints, events, deliveries and attempts refer to each other and live
        # together. Anything else is left to Django's default: same database only.
        if _is_ours(obj1) and _is_ours(obj2):
            return True
        return None

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        # Only on the queue database: tables in two databases would leave an
        # operator guessing which one is live.
        if app_label == APP_LABEL:
            return db == get_settings().DATABASE
        return None


def warn_if_outside_queue_transaction(alias: str, what: str, *, stacklevel: int) -> None:
    """Warn when the caller's open transaction is on another database than ``alias``.

    The queue's row then commits on its own: if the caller's transaction rolls
    back, the job still runs (or the event is still sent). A transaction open
    on the queue's database (``transaction.atomic(using=alias)``) is the
    caller saying it knows; so is no transaction at all.

    Only for a queue moved off ``default``: on ``default`` (the usual case) it
    returns at once, because each look at a connection goes through a
    thread-local and the scan would cost an enqueue about as much as the
    rest of its Python side. A transaction on a third database is then the
    project's own multi-database design.
    """
    if alias == DEFAULT_DB_ALIAS or connections[alias].in_atomic_block:
        return
    for conn in connections.all(initialized_only=True):
        if conn.in_atomic_block:
            warnings.warn(
                f"{what} wrote to the queue database {alias!r} outside the transaction open "
                f"on {conn.alias!r}: it is committed already and stays if that transaction "
                "rolls back. See 'Moving the queue to its own database' in docs/operations.md.",
                CrossDatabaseEnqueueWarning,
                stacklevel=stacklevel + 1,
            )
            return
