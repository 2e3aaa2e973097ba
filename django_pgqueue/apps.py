from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PgQueueConfig(AppConfig):
    name = "django_pgqueue"
    label = "django_pgqueue"
    verbose_name = _("Queue")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import (
            checks,  # noqa: F401  (registers the system checks)
            # The Tasks framework now: Django 6 registers its system check (which asks
            # each backend for its messages, E010 among them) when django.tasks is
            # first imported. Imported by another check during `manage.py check`, it
            # would register too late for that run, and whether it did depended on the
            # order Django runs its checks in (a set's).
            compat,  # noqa: F401
            conf,  # noqa: F401  (connects the settings cache reset)
        )
