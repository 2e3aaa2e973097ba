"""What one attempt of a claimed row came to, as its source's store will write it.

Every kind shares :class:`Outcome`'s fields: the row and its claim token (the
fence every write presents), the status to write, when to try again, the
attempt's text error and refund, and what the log line and metrics show. Each
source has its own subclass for what only its rows record. The completer writes
the outcomes of a batch grouped by ``source`` (the name of the Source whose row
it is, ``worker/sources.py``), each group through its source's store.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass


@dataclass(slots=True)
class Outcome:
    """What to write for one attempt of any claimed row (see sql.COMPLETE_JOBS)."""

    #: The claimed row's id in its source.
    id: int
    token: uuid.UUID
    status: str
    #: Seconds until a row that goes back to waiting is due again.
    delay: float = 0.0
    last_error: str | None = None
    #: 1 gives back the attempt counted at claim time (a row released unrun).
    refund: int = 0
    # For the log line and the metrics only.
    task_path: str = ""
    attempt: int = 0
    duration: float = 0.0
    #: Name of the Source the row belongs to (sources.py), set by the Worker.
    source: str = ""
    #: The row's id in its own table when ``id`` is only the worker's handle for it
    #: (a message's ``msg_id``): what the log line names.
    row_id: int | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.source, self.id)


@dataclass(slots=True)
class JobOutcome(Outcome):
    """A job's attempt: its return value or the error entry appended to ``errors``."""

    #: The task's return value as JSON (a success).
    result_json: str | None = None
    #: One entry of the job's ``errors`` history, as JSON (a failure).
    error_json: str | None = None
    source: str = "jobs"
    #: Written already: an atomic job's success, committed with its body's writes.
    committed: bool = False
    #: The job's queue and its wait from due to claim, for the console's rollup
    #: (set by ``worker/sources.JobSource`` from the claimed row).
    queue_name: str = ""
    wait: float = 0.0
    #: Whether the job may be a workflow step, whose completion must release its
    #: children. False only when its claim said it is not one (``JobSource``, from
    #: ``ClaimedJob.step``): a batch of such outcomes skips the release's planning.
    step: bool = True


@dataclass(slots=True)
class DeliveryOutcome(Outcome):
    """A webhook delivery's attempt, with what its attempt log row records."""

    #: The breaker's reading of the attempt (webhooks/breaker.py): 'success',
    #: 'failure', 'gone', 'local' (our side failed) or 'none' (released unsent,
    #: not logged).
    verdict: str = "none"
    started_at: dt.datetime | None = None
    duration_ms: int = 0
    status_code: int | None = None
    #: The response's headers as a JSON object, and its body: escaped and bounded
    #: (storable.py), so one hostile response cannot fail the batch it is written in.
    headers: str = "{}"
    body: str = ""
    truncated: bool = False
    #: The request headers the attempt sent, as a JSON object, redacted by
    #: ``webhooks/redaction.py``'s rule and made storable.
    request_headers: str = "{}"
    #: What went wrong on the wire, for the attempt log ('' when nothing did).
    error: str = ""
    source: str = "deliveries"
    #: The delivery's endpoint, for the console's rollup.
    endpoint_id: int = 0


@dataclass(slots=True)
class MessageOutcome(Outcome):
    """A consumed message's end: what to do with it (mq/source.py)."""

    #: What the settle statement does with the message: 'retry' (visible again after
    #: ``delay``), 'release', or the consumer's action on success.
    action: str = "retry"
    source: str = "messages"
