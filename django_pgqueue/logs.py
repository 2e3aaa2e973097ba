"""Worker logging that works without a ``LOGGING`` setting.

``startproject`` configures no handler for ``django_pgqueue`` (Django's own console
handler only covers ``django.*``, and only with ``DEBUG``), so a worker would be silent.
``runworkers`` calls :func:`configure_worker_logging`: when nothing in the project
handles our records, it installs one stderr handler whose level follows ``-v`` (0:
errors, 1: a start line and a line per finished attempt, 2: debug). ``--log-format
json`` writes one JSON object per line with the stable field names of
:data:`JSON_FIELDS` (see docs/worker.md), and is honoured even when the project has
handlers of its own, since it was asked for.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any

#: The logger every module of the package logs under (``django_pgqueue.worker``...).
ROOT_LOGGER = "django_pgqueue"

VERBOSITY_LEVELS = {0: logging.ERROR, 1: logging.INFO, 2: logging.DEBUG}

#: Fields a JSON line may carry beyond time, level, logger and message, in this order.
#: ``event`` names the kind of line: ``worker_started``, ``attempt``, ``worker_stopped``.
JSON_FIELDS = (
    "event",
    "worker_id",
    "source",
    "task",
    "job_id",
    "attempt",
    "duration",
    "outcome",
    "queues",
    "concurrency",
    "error",
    "traceback",
)

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, then
    whichever of :data:`JSON_FIELDS` the record carries; ``traceback`` for exceptions."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in JSON_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info and "traceback" not in line:
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The plain format, with a failed attempt's traceback under its line."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        tb = getattr(record, "traceback", None)
        if tb and not record.exc_info:
            text = f"{text}\n{tb.rstrip()}"
        return text


def project_handles(name: str = f"{ROOT_LOGGER}.worker") -> bool:
    """Whether any handler would see records of logger ``name`` (the project's LOGGING)."""
    logger: logging.Logger | None = logging.getLogger(name)
    while logger is not None:
        if logger.handlers:
            return True
        if not logger.propagate:
            return False
        logger = logger.parent
    return False


def configure_worker_logging(verbosity: int = 1, log_format: str | None = None) -> bool:
    """Install a stderr handler on ``django_pgqueue`` unless the project has one.

    Returns whether a handler was installed. Calling it again replaces the handler it
    installed before (``--reload`` runs the command in a fresh process anyway).
    """
    logger = logging.getLogger(ROOT_LOGGER)
    for handler in list(logger.handlers):
        if getattr(handler, "_pgqueue_default", False):
            logger.removeHandler(handler)
    if log_format is None and project_handles():
        return False
    handler = logging.StreamHandler(sys.stderr)
    handler._pgqueue_default = True  # type: ignore[attr-defined]
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    logger.addHandler(handler)
    logger.setLevel(VERBOSITY_LEVELS.get(verbosity, logging.DEBUG))
    _drop_task_framework_repeats()
    # With an explicit format, our records stop at this logger: handlers the project put
    # on the root (or on "django") do not print them a second time in another format.
    logger.propagate = log_format is None
    return True


class _TaskFrameworkRepeats(logging.Filter):
    """Drops the Tasks framework's own "started" and "finished" records.

    The framework logs each task's start and end (a failure's with its traceback)
    under its logger; Django's console handler prints them with ``DEBUG`` on, and
    ``logging``'s last resort prints a failure's always. Beside the worker's line per
    attempt they say the same thing again: two or three lines per job and every
    traceback twice. Only those two receivers' records are dropped; anything else
    logged under that logger passes.
    """

    REPEATS = frozenset({"log_task_started", "log_task_finished"})

    def filter(self, record: logging.LogRecord) -> bool:
        return record.funcName not in self.REPEATS


def _drop_task_framework_repeats() -> None:
    """Where the worker prints its own lines, do not print each attempt twice.

    A project that configured the framework's logger itself (a handler, a level or a
    filter of its own) asked for those records and keeps them.
    """
    from .compat import TASKS_MODULE

    tasks_logger = logging.getLogger(TASKS_MODULE)
    if any(isinstance(f, _TaskFrameworkRepeats) for f in tasks_logger.filters):
        return
    if tasks_logger.handlers or tasks_logger.filters or tasks_logger.level != logging.NOTSET:
        return
    tasks_logger.addFilter(_TaskFrameworkRepeats())


def log_attempt(logger: logging.Logger, worker_id: str, outcome: Any, label: str) -> None:
    """The line for one finished attempt: INFO, or ERROR with its traceback on failure."""
    failed = label in ("failed", "dead")
    level = logging.ERROR if failed else logging.INFO
    if not logger.isEnabledFor(level):
        return
    row_id = outcome.id if getattr(outcome, "row_id", None) is None else outcome.row_id
    extra: dict[str, Any] = {
        "event": "attempt",
        "worker_id": worker_id,
        "source": outcome.source,
        "task": outcome.task_path,
        "job_id": row_id,
        "attempt": outcome.attempt,
        "duration": round(outcome.duration, 6),
        "outcome": label,
    }
    if failed:
        extra["error"] = outcome.last_error
        error_json = getattr(outcome, "error_json", None)  # jobs record a traceback
        if error_json:
            try:
                extra["traceback"] = json.loads(error_json).get("traceback")
            except (TypeError, ValueError, AttributeError):
                pass
    logger.log(
        level,
        "%s %s %s attempt=%d duration=%.3fs outcome=%s%s",
        outcome.source,
        row_id,
        outcome.task_path,
        outcome.attempt,
        outcome.duration,
        label,
        f" error={outcome.last_error}" if failed and not extra.get("traceback") else "",
        extra=extra,
    )
