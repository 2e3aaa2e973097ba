"""Database models: the abstract queue row, jobs and (webhooks) deliveries."""

from .queue import Job, QueueRow, Status

__all__ = ["Job", "QueueRow", "Status"]
