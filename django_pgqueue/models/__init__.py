"""Database models: the abstract queue row, jobs, schedules and webhook deliveries.

What the models cannot declare (the queue tables' autovacuum settings, the trigger
that parks a disabled endpoint's deliveries) is declared in ``database_objects.py``.
"""

from django.apps import apps as _apps
from django.core.exceptions import ImproperlyConfigured as _ImproperlyConfigured

# Importing the models of an app that is not installed fails deep in model loading with
# a RuntimeError about app_label; say what to do instead (the TASKS backend imports them).
if _apps.apps_ready and not _apps.is_installed("django_pgqueue"):
    raise _ImproperlyConfigured(
        "django_pgqueue is used (TASKS names its backend, or its models were imported) but "
        "'django_pgqueue' is not in INSTALLED_APPS: add it, then run `manage.py migrate`."
    )

from .api import ApiKey, ApiRateLimit, ApiScope
from .flow import Queue, QueueKeyRate
from .mq import MessageQueue, TopicBinding
from .queue import Job, JobHistory, QueueRow, Status
from .rollup import Rollup, RollupKind
from .schedule import CatchUp, Schedule, ScheduleTick
from .webhooks import (
    Application,
    BreakerState,
    Delivery,
    DeliveryAttempt,
    Endpoint,
    Event,
    Ordering,
    RatePeriod,
)
from .workers import WorkerHeartbeat
from .workflows import Workflow, WorkflowEdge, WorkflowKind

__all__ = [
    "ApiKey",
    "ApiRateLimit",
    "ApiScope",
    "Application",
    "BreakerState",
    "CatchUp",
    "Delivery",
    "DeliveryAttempt",
    "Endpoint",
    "Event",
    "Job",
    "JobHistory",
    "MessageQueue",
    "Ordering",
    "Queue",
    "QueueKeyRate",
    "QueueRow",
    "RatePeriod",
    "Rollup",
    "RollupKind",
    "Schedule",
    "ScheduleTick",
    "Status",
    "TopicBinding",
    "WorkerHeartbeat",
    "Workflow",
    "WorkflowEdge",
    "WorkflowKind",
]
