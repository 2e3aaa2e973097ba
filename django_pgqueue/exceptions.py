"""Exceptions raised by django_pgqueue."""

from __future__ import annotations


class PgQueueError(Exception):
    """Base class of django_pgqueue's own errors."""


class ArgumentsNotJSON(PgQueueError, TypeError):
    """A task argument cannot be stored as JSON (nothing was written).

    Not a JSON type, NaN or infinity, a NUL character or lone surrogate in a string
    or key, or nested deeper than ``PGQUEUE["MAX_JSON_DEPTH"]``; the message names
    the argument and the path inside it.
    """


class PayloadNotJSON(PgQueueError, TypeError, ValueError):
    """A webhook payload cannot be stored and sent as JSON (nothing was written).

    The same contract as :class:`ArgumentsNotJSON`. A ``TypeError`` and a
    ``ValueError``, as ``send_event`` raised for these before.
    """


class ResultNotStorable(PgQueueError, TypeError):
    """A task returned a value that cannot be stored as JSON (the attempt fails).

    The same contract as :class:`ArgumentsNotJSON`, checked by the worker.
    """


class PayloadTooLarge(PgQueueError, ValueError):
    """Arguments or a webhook payload exceed the configured size limit."""


class LeaseExpired(PgQueueError):
    """Recorded when a worker stopped renewing its lease (it died or lost the database)."""


class OutcomeNotStored(PgQueueError):
    """Recorded when PostgreSQL refused the values of an attempt's outcome.

    The worker writes the row again without them, with the database's reason; other
    outcomes written in the same batch are not affected.
    """


class WorkerInterrupted(PgQueueError):
    """Recorded when a graceful shutdown could not wait for a task to finish."""


class NotATask(PgQueueError):
    """The stored task path imports, but not to a Task object."""


class StoredJSONNotDecodable(PgQueueError, ValueError):
    """A JSON value stored in one of our tables cannot be read back as Python values:
    nested deeper than Python's recursion limit, an integer of more than 4300
    digits, a number beyond a float. The doors refuse all three; a row written past
    them can hold them (``stored_json.py``)."""


class ArgumentsNotDecodable(PgQueueError):
    """A claimed job's stored arguments cannot be read back as Python values: JSON
    nested deeper than Python's recursion limit, an integer of more than 4300 digits,
    a number beyond a float. ``enqueue()`` refuses all three; a row written past it
    (by hand, by another program) can hold them. Recorded as the job's only attempt,
    which ends it ``dead``; the jobs claimed with it run as usual."""


class CrossDatabaseEnqueueWarning(RuntimeWarning):
    """A job or event was written outside the caller's open transaction.

    Raised as a warning when ``enqueue()``, ``enqueue_many()`` or ``send_event()``
    runs inside ``transaction.atomic()`` on a database other than the queue's
    (``PGQUEUE["DATABASE"]``, when it is not ``default``) and no transaction is
    open on the queue's: the row commits on its own, whatever the caller's
    transaction does later.
    """


class InvalidUniqueKey(PgQueueError, ValueError):
    """A unique key is empty, not a string or too long (nothing was written)."""


class DuplicateJob(PgQueueError):
    """A live job already holds this unique key (raised with ``on_duplicate="raise"``).

    ``job_id`` is the live job's id.
    """

    def __init__(self, message: str, *, job_id: int | None) -> None:
        super().__init__(message)
        self.job_id = job_id


class TaskTimeout(PgQueueError):
    """Recorded when a task ran past its ``timeout``; the attempt is retried per its backoff."""


class TaskAborted(PgQueueError):
    """Recorded when an operator aborted a running job; the job ends ``cancelled``."""


class WorkerCrashed(PgQueueError):
    """Recorded when a task thread died without describing its attempt."""


class UnknownApplication(PgQueueError, LookupError):
    """``send_event(application=...)`` names no active application: nothing was sent."""


class EventSchemaError(PgQueueError, ValueError):
    """``send_event`` with validation: an undeclared event type, or a payload its
    declared JSON Schema refuses. Nothing was sent."""


class IdempotencyKeyConflict(PgQueueError, ValueError):
    """``send_event``: the idempotency key was already used by an event of another
    application. Nothing was sent."""


class InvalidWorkflow(PgQueueError, ValueError):
    """A workflow or batch that cannot be enqueued as given: a cycle, an unknown
    parent, a step of another workflow, an empty workflow. Nothing was written."""
