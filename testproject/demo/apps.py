import os

from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "testproject.demo"
    label = "demo"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The demo's periodic tasks only where the demo asks for them: test
        # workers must not enqueue jobs of their own.
        if os.environ.get("PGQUEUE_DEMO_SCHEDULE", "") == "1":
            from . import periodic  # noqa: F401  (registers @periodic)
