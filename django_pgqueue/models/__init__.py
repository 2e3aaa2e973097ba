"""Database models: the abstract queue row, jobs, schedules and webhook deliveries."""

from .queue import Job, QueueRow, Status
from .schedule import CatchUp, Schedule, ScheduleTick
from .webhooks import BreakerState, Delivery, DeliveryAttempt, Endpoint, Event

__all__ = [
    "BreakerState",
    "CatchUp",
    "Delivery",
    "DeliveryAttempt",
    "Endpoint",
    "Event",
    "Job",
    "QueueRow",
    "Schedule",
    "ScheduleTick",
    "Status",
]
