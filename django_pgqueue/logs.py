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
import threading
import time
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


#: A failure whose task and error repeat within this many seconds is logged once,
#: then counted: a consumer failing every 30 s does not print its traceback each time.
REPEAT_SECONDS = 300.0


class RepeatedFailures:
    """How often a failure (its source and its error text) repeated in REPEAT_SECONDS.

    One per process (:data:`repeated_failures`): the attempt log and the message
    consumers' log ask it before printing a traceback.
    """

    def __init__(self, window: float = REPEAT_SECONDS) -> None:
        self.window = window
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}
        self._lock = threading.Lock()

    def seen(self, where: str, error: str) -> int:
        """Times this failure was seen since it was last logged in full (0: log it)."""
        key = (where, error)
        now = time.monotonic()
        with self._lock:
            if len(self._seen) > 1000:  # many distinct errors: start afresh
                self._seen.clear()
            first, count = self._seen.get(key, (0.0, 0))
            if count and now - first < self.window:
                self._seen[key] = (first, count + 1)
                return count
            self._seen[key] = (now, 1)
            return 0


repeated_failures = RepeatedFailures()


def repeat_note(seen: int) -> str:
    """The tail of a line whose traceback is left out because the failure repeats."""
    return (
        f" (the same failure {seen + 1} times in {REPEAT_SECONDS:.0f} s; traceback shown "
        "the first time)"
        if seen
        else ""
    )


class AttemptLog:
    """The log of finished attempts of one worker process (``PGQUEUE["JOB_LOG"]``).

    ``"each"``: one INFO line per attempt. ``"summary"``: per-attempt lines at DEBUG
    and one INFO line of counts per ``summary_seconds``; thousands of INFO lines a
    second otherwise cost more than the jobs. In both modes a failed attempt that
    will be retried is a WARNING and one that went to the dead-letter queue an
    ERROR, each with its own line, and the same failure (task and error) repeating
    within REPEAT_SECONDS keeps its traceback only the first time.
    """

    def __init__(self, mode: str = "each", summary_seconds: float = 60.0) -> None:
        self.mode = mode
        self.summary_seconds = summary_seconds
        self._counts: dict[str, int] = {}
        self._window_start = time.monotonic()
        self._lock = threading.Lock()

    def record(self, logger: logging.Logger, worker_id: str, outcome: Any, label: str) -> None:
        """Log one written attempt (the worker's completer thread calls this)."""
        failed = label in ("failed", "dead")
        if failed:
            level = logging.ERROR if label == "dead" else logging.WARNING
        else:
            level = logging.INFO if self.mode == "each" else logging.DEBUG
        if self.mode == "summary":
            self._count(logger, worker_id, label)
        if not logger.isEnabledFor(level):
            return
        repeated = (
            repeated_failures.seen(str(outcome.task_path), str(outcome.last_error)) if failed else 0
        )
        log_attempt(logger, worker_id, outcome, label, level=level, repeated=repeated)

    def _count(self, logger: logging.Logger, worker_id: str, label: str) -> None:
        with self._lock:
            self._counts[label] = self._counts.get(label, 0) + 1
            now = time.monotonic()
            if now - self._window_start < self.summary_seconds:
                return
            counts, self._counts = self._counts, {}
            elapsed, self._window_start = now - self._window_start, now
        self._summary(logger, worker_id, counts, elapsed)

    def flush(self, logger: logging.Logger, worker_id: str) -> None:
        """Log what the current window counted (at the worker's stop)."""
        with self._lock:
            counts, self._counts = self._counts, {}
            now = time.monotonic()
            elapsed, self._window_start = now - self._window_start, now
        if counts:
            self._summary(logger, worker_id, counts, elapsed)

    @staticmethod
    def _summary(
        logger: logging.Logger, worker_id: str, counts: dict[str, int], elapsed: float
    ) -> None:
        logger.info(
            "Worker %s: %d attempt(s) in %.0f s: %s",
            worker_id,
            sum(counts.values()),
            elapsed,
            " ".join(f"{label}={n}" for label, n in sorted(counts.items())),
            extra={"event": "attempt_summary", "worker_id": worker_id, "outcome": counts},
        )


def log_attempt(
    logger: logging.Logger,
    worker_id: str,
    outcome: Any,
    label: str,
    *,
    level: int | None = None,
    repeated: int = 0,
) -> None:
    """The line for one finished attempt, its traceback on failure unless ``repeated``."""
    failed = label in ("failed", "dead")
    if level is None:
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
        if error_json and not repeated:
            try:
                extra["traceback"] = json.loads(error_json).get("traceback")
            except (TypeError, ValueError, AttributeError):
                pass
    logger.log(
        level,
        "%s %s %s attempt=%d duration=%.3fs outcome=%s%s%s",
        outcome.source,
        row_id,
        outcome.task_path,
        outcome.attempt,
        outcome.duration,
        label,
        f" error={outcome.last_error}" if failed and not extra.get("traceback") else "",
        repeat_note(repeated),
        extra=extra,
    )
