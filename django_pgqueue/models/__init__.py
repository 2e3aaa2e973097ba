"""Database models: the abstract queue row, jobs, schedules and webhook deliveries."""

from .queue import Job, QueueRow, Status
from .schedule import CatchUp, Schedule, ScheduleTick
from .webhooks import BreakerState, Delivery, DeliveryAttempt, Endpoint, Event, Ordering, RatePeriod

__all__ = [
    "BreakerState",
    "CatchUp",
    "Delivery",
    "DeliveryAttempt",
    "Endpoint",
    "Event",
    "Job",
    "Ordering",
    "QueueRow",
    "RatePeriod",
    "Schedule",
    "ScheduleTick",
    "Status",
]
