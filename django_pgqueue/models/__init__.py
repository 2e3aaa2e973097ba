"""Database models: the abstract queue row, jobs and webhook deliveries."""

from .queue import Job, QueueRow, Status
from .webhooks import BreakerState, Delivery, DeliveryAttempt, Endpoint, Event, Ordering, RatePeriod

__all__ = [
    "BreakerState",
    "Delivery",
    "DeliveryAttempt",
    "Endpoint",
    "Event",
    "Job",
    "Ordering",
    "QueueRow",
    "RatePeriod",
    "Status",
]
