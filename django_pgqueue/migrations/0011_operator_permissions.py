"""Operator permissions by consequence: ``replay_*`` (the work runs again) and
``cancel_*`` (the work will not run) for jobs and deliveries, and
``manage_endpoint_secret`` (reveal and rotate signing secrets) beside
``manage_endpoint``.

Until now ``replay_job`` and ``replay_delivery`` also allowed cancel, abort and
move to the DLQ, and ``manage_endpoint`` also allowed the secrets. So nobody loses
an operation on upgrade, every user and group holding one of those permissions is
given the new one that now covers what it used to allow. Only a database where the
old permission exists (an upgrade) has holders; a fresh one gets the new
permissions from ``migrate``'s post_migrate step, as usual.
"""

from typing import Any

from django.apps import apps as global_apps
from django.contrib.auth import get_user_model
from django.core.exceptions import FieldDoesNotExist
from django.db import connections, migrations, router

APP_LABEL = "django_pgqueue"

#: Old codename -> the permission (codename, name) its holders are given.
GRANTS = {
    "replay_job": ("cancel_job", "Can cancel, abort or dead-letter jobs"),
    "replay_delivery": ("cancel_delivery", "Can cancel or dead-letter webhook deliveries"),
    "manage_endpoint": (
        "manage_endpoint_secret",
        "Can reveal and rotate signing secrets of webhook endpoints",
    ),
}

#: Codenames kept with a narrower meaning: (name before, name after).
RENAMED = {
    "replay_job": ("Can replay, retry or cancel jobs", "Can replay jobs or retry them now"),
    "replay_delivery": (
        "Can replay, retry or cancel webhook deliveries",
        "Can replay webhook deliveries or retry them now",
    ),
    "manage_endpoint": (
        "Can rotate secrets, enable and disable webhook endpoints",
        "Can enable, disable, reset and test webhook endpoints",
    ),
}


def _permission_table(model: Any) -> tuple[Any, str] | None:
    """``model``'s permission M2M table and the column naming the holder (user or
    group); None if it has none (a custom user model without PermissionsMixin)."""
    name = "permissions" if model._meta.model_name == "group" else "user_permissions"
    try:
        field = model._meta.get_field(name)
    except FieldDoesNotExist:
        return None
    through = field.remote_field.through
    return through, f"{field.m2m_field_name()}_id"


def _auth_models() -> tuple[Any, list[Any], str] | None:
    """Permission, the holder models (Group, the user model) and the database they live
    in; None if ``django.contrib.auth`` is not installed or its tables are not there.

    These are the installed models, not the historical ones: the queue's migrations
    may run on a database whose migration state has no auth app at all (``migrate
    --database queue django_pgqueue``, docs/operations.md) while the permissions
    live in ``default``, and these tables' columns are Django's own, stable ones.
    """
    if not global_apps.is_installed("django.contrib.auth"):
        return None
    permission = global_apps.get_model("auth", "Permission")
    alias = router.db_for_write(permission)
    if permission._meta.db_table not in connections[alias].introspection.table_names():
        return None
    return permission, [global_apps.get_model("auth", "Group"), get_user_model()], alias


def grant_new_permissions(apps: Any, schema_editor: Any) -> None:
    found = _auth_models()
    if found is None:
        return
    permission, holders, alias = found
    permissions = permission.objects.using(alias)
    for old_codename, (codename, name) in GRANTS.items():
        old = permissions.filter(content_type__app_label=APP_LABEL, codename=old_codename).first()
        if old is None:
            continue
        new, _ = permissions.get_or_create(
            content_type_id=old.content_type_id, codename=codename, defaults={"name": name}
        )
        for model in holders:
            table = _permission_table(model)
            if table is None:
                continue
            through, column = table
            held_by = through.objects.using(alias).filter(permission_id=old.pk)
            through.objects.using(alias).bulk_create(
                [
                    through(**{column: holder, "permission_id": new.pk})
                    for holder in held_by.values_list(column, flat=True)
                ],
                ignore_conflicts=True,
            )
    _rename(permissions, after=True)


def restore_names(apps: Any, schema_editor: Any) -> None:
    # The new permissions and their grants stay: the old code never asks for them.
    found = _auth_models()
    if found is not None:
        permission, _holders, alias = found
        _rename(permission.objects.using(alias), after=False)


def _rename(permissions: Any, *, after: bool) -> None:
    for codename, names in RENAMED.items():
        permissions.filter(content_type__app_label=APP_LABEL, codename=codename).update(
            name=names[1] if after else names[0]
        )


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0010_applications"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="delivery",
            options={
                "permissions": [
                    ("replay_delivery", "Can replay webhook deliveries or retry them now"),
                    ("cancel_delivery", "Can cancel or dead-letter webhook deliveries"),
                ],
                "verbose_name": "webhook delivery",
                "verbose_name_plural": "webhook deliveries",
            },
        ),
        migrations.AlterModelOptions(
            name="endpoint",
            options={
                "permissions": [
                    ("manage_endpoint", "Can enable, disable, reset and test webhook endpoints"),
                    (
                        "manage_endpoint_secret",
                        "Can reveal and rotate signing secrets of webhook endpoints",
                    ),
                ],
                "verbose_name": "webhook endpoint",
                "verbose_name_plural": "webhook endpoints",
            },
        ),
        migrations.AlterModelOptions(
            name="job",
            options={
                "permissions": [
                    ("replay_job", "Can replay jobs or retry them now"),
                    ("cancel_job", "Can cancel, abort or dead-letter jobs"),
                ],
                "verbose_name": "job",
                "verbose_name_plural": "jobs",
            },
        ),
        migrations.RunPython(grant_new_permissions, restore_names),
    ]
