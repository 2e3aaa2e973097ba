"""Database models: the abstract queue row, jobs and webhook deliveries."""

from .mq import MessageQueue
from .queue import Job, QueueRow, Status
from .webhooks import BreakerState, Delivery, DeliveryAttempt, Endpoint, Event

__all__ = [
    "BreakerState",
    "Delivery",
    "DeliveryAttempt",
    "Endpoint",
    "Event",
    "Job",
    "MessageQueue",
    "QueueRow",
    "Status",
]
