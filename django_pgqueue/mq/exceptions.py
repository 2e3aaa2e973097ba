"""Errors of the message-queue API (all are also ``PgQueueError``)."""

from __future__ import annotations

from ..exceptions import PgQueueError


class QueueError(PgQueueError):
    """Base class of message-queue errors."""


class InvalidQueueName(QueueError, ValueError):
    """The queue name is not valid (pattern or length); nothing was run."""


class QueueNotFound(QueueError, LookupError):
    """No message queue of that name exists (create it with ``mq.create``)."""


class QueueExists(QueueError):
    """A queue of that name exists with different options."""


class ArchiveNotReady(QueueError):
    """The queue's partitioned archive has no partition for the day: nothing was
    archived and the messages are still in the queue. The days are made ahead by the
    workers' maintenance and by ``manage.py pgqueue_prune``."""


class QueueInUse(QueueError):
    """The queue cannot be dropped: it is another queue's dead-letter queue."""


class InvalidMessage(QueueError, ValueError):
    """A message or its headers break the message rules; nothing was written."""
