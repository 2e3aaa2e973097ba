import os

from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "testproject.demo"
    label = "demo"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Consumers register when their module is imported, as signal receivers do.
        # Opt-in here so that only the tests about consumers run them.
        if os.environ.get("DEMO_MQ_CONSUMERS") == "1":
            from . import consumers  # noqa: F401
