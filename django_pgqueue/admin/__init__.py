"""The queue console in Django's admin (docs/admin.md).

Importing this package (Django's admin autodiscovery does) registers the admins.
The admin index gets a "Queues" box linking the dashboard when the project has
not set its own ``index_template``.
"""

from django.contrib import admin

from .api_keys import ApiKeyAdmin
from .applications import ApplicationAdmin
from .deliveries import DeliveryAdmin, EventAdmin
from .endpoints import EndpointAdmin
from .history import JobHistoryAdmin
from .jobs import JobAdmin
from .mq import MessageQueueAdmin
from .queues import QueueAdmin
from .schedules import ScheduleAdmin
from .workflows import WorkflowAdmin

__all__ = [
    "ApiKeyAdmin",
    "ApplicationAdmin",
    "DeliveryAdmin",
    "EndpointAdmin",
    "EventAdmin",
    "JobAdmin",
    "JobHistoryAdmin",
    "MessageQueueAdmin",
    "QueueAdmin",
    "ScheduleAdmin",
    "WorkflowAdmin",
]

if admin.site.index_template is None:
    admin.site.index_template = "admin/django_pgqueue/index.html"
