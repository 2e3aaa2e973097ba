"""What happens once an attempt's outcome is written: its log line, and whatever else
asked to be told (the Prometheus metrics of ``runworkers --metrics-port``).

The worker calls :func:`attempt_written` for every outcome that reached the database;
observers are plain callables so that optional integrations need no change here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..conf import get_settings
from ..logs import AttemptLog

logger = logging.getLogger("django_pgqueue.worker")

#: Callables ``(worker_id, outcome, label)`` called after each written outcome.
AttemptObserver = Callable[[str, Any, str], None]
attempt_observers: list[AttemptObserver] = []

_log: AttemptLog | None = None


def attempt_log() -> AttemptLog:
    """This process's attempt log, set up from ``PGQUEUE["JOB_LOG"]`` on first use."""
    global _log
    conf = get_settings()  # cached; a changed setting (tests) takes effect at once
    if _log is None or (_log.mode, _log.summary_seconds) != (
        conf.JOB_LOG,
        conf.JOB_LOG_SUMMARY_SECONDS,
    ):
        _log = AttemptLog(conf.JOB_LOG, conf.JOB_LOG_SUMMARY_SECONDS)
    return _log


def attempt_written(worker_id: str, outcome: Any, label: str) -> None:
    """Log the attempt, then tell every observer (an observer's error is logged only)."""
    attempt_log().record(logger, worker_id, outcome, label)
    for observer in attempt_observers:
        try:
            observer(worker_id, outcome, label)
        except Exception:
            logger.exception("An attempt observer failed")
