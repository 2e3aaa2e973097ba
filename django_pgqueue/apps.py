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
            conf,  # noqa: F401  (connects the settings cache reset)
        )
