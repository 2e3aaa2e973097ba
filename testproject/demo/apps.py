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
        # Consumers register when their module is imported, as signal receivers do.
        # Opt-in here so that only the tests about consumers run them.
        if os.environ.get("DEMO_MQ_CONSUMERS") == "1":
            from . import consumers  # noqa: F401
        # The pressure cells' consumer (scripts/pressure_cells_mq.py, ``workers``).
        if os.environ.get("PRESSURE_CELL_PAUSE_MS"):
            from . import cell  # noqa: F401
