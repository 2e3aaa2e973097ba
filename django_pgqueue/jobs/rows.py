"""A job's rows as the job store reads them, decoded by column name.

Each dataclass here is the Python side of one declared column list in
``sql/jobs.py`` (``CLAIMED_JOB_COLUMNS``, ``JOB_ROW_COLUMNS``); the statement's
select list is built from the same list. :func:`row_decoder` matches the two by
name once, at import, so a column added to the list and to the dataclass lands in
the right attribute whatever its position, and a name on one side only is an
error at import rather than a value in the wrong field at run time.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import operator
import uuid
from collections.abc import Callable, Iterable, Sequence
from itertools import starmap
from typing import Any, Generic, TypeVar

from .. import sql

T = TypeVar("T")


class RowDecoder(Generic[T]):
    """Builds ``cls`` objects from rows whose columns are ``names``, by name.

    The work per row is the dataclass constructor and nothing else: when the
    columns come in field order (the usual case) the row is passed as is, else an
    ``operator.itemgetter`` made here reorders it. No per-row dict.
    """

    def __init__(self, cls: Callable[..., T], names: Sequence[str]) -> None:
        fields = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        missing = [f for f in fields if f not in names]
        unknown = [n for n in names if n not in fields]
        if missing or unknown or len(set(names)) != len(names):
            raise TypeError(
                f"{cls.__name__} cannot be decoded from the columns {list(names)}: "
                f"fields without a column {missing}, columns without a field {unknown}"
            )
        self.cls = cls
        positions = [list(names).index(f) for f in fields]
        self._reorder: Callable[[Sequence[Any]], Sequence[Any]] | None = (
            None if positions == list(range(len(names))) else operator.itemgetter(*positions)
        )

    def one(self, row: Sequence[Any]) -> T:
        """The object of one row."""
        if self._reorder is None:
            return self.cls(*row)
        return self.cls(*self._reorder(row))

    def all(self, rows: Iterable[Sequence[Any]]) -> list[T]:
        """The objects of many rows, in order."""
        if self._reorder is None:
            return list(starmap(self.cls, rows))
        return list(starmap(self.cls, map(self._reorder, rows)))


@dataclasses.dataclass(slots=True)
class ClaimedJob:
    """A job as a claim returned it (``sql.CLAIMED_JOB_COLUMNS``): what a worker needs
    to run it and to fence every later write with its claim ``token``."""

    id: int
    status: str
    token: uuid.UUID
    attempts: int
    max_attempts: int
    task_path: str
    # JSON text from the claim; the runner decodes them for the attempt
    # (``worker/runner.py``), so that one row Python cannot read fails alone.
    args: list[Any] | str
    kwargs: dict[str, Any] | str
    queue_name: str
    priority: int
    backend: str
    # Seconds since the epoch (UTC), or None: made datetimes only when a TaskResult
    # is built (``worker/runner.py``), which a drain of short tasks seldom does.
    created_at: float | None
    started_at: float | None
    last_attempted_at: float | None
    # The attempt log and worker ids come as JSON text from the claim and are
    # decoded only when a TaskResult is built (signal_gate.SignalGate): a drain of
    # short tasks spent a visible share of its claim loop decoding them for nobody.
    errors: list[dict[str, Any]] | str
    worker_ids: list[str] | str
    #: Seconds from when the job was due to this claim (the rollup's wait).
    wait: float
    #: A workflow step (``workflow_id`` set): its completion releases its children.
    #: True when unknown, so a row built without it is completed with the release.
    step: bool = True

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> ClaimedJob:
        """The job of one row of a claim statement."""
        return CLAIMED_JOB.one(row)


@dataclasses.dataclass(slots=True)
class JobRow:
    """A job as ``get_result`` reads it (``sql.JOB_ROW_COLUMNS``). JSON columns are as
    the cursor returned them (Django's cursors hand jsonb back as text)."""

    id: int
    status: str
    task_path: str
    args: Any
    kwargs: Any
    queue_name: str
    priority: int
    backend: str
    next_attempt_at: dt.datetime
    created_at: dt.datetime
    started_at: dt.datetime | None
    last_attempted_at: dt.datetime | None
    finished_at: dt.datetime | None
    errors: Any
    worker_ids: Any
    result: Any
    progress: float | None
    progress_message: str | None
    progress_at: dt.datetime | None
    #: The workflow of a step and its name in it (None for a plain job).
    workflow_id: int | None
    step_name: str | None
    #: Attempts started so far, and how many it may have (``GET /jobs/{id}``).
    attempts: int
    max_attempts: int


CLAIMED_JOB: RowDecoder[ClaimedJob] = RowDecoder(
    ClaimedJob, [name for name, _ in sql.CLAIMED_JOB_COLUMNS]
)
JOB_ROW: RowDecoder[JobRow] = RowDecoder(JobRow, sql.JOB_ROW_COLUMNS)
