"""Whether sending a Tasks signal can have any effect: ``SignalGate``.

Used by the backend (``task_enqueued``) and by the worker's runner
(``task_started``, ``task_finished``), so it lives apart from both and imports
neither.
"""

from __future__ import annotations

import importlib
import logging
import time
import weakref
from typing import Any

from django.conf import settings

from .compat import TASKS_MODULE

#: Seconds a SignalGate reuses its answer: the logging configuration it depends
#: on is read again after that (a receiver connected or disconnected is noticed at
#: once). Walking the logger chain twice per job cost a no-op task a third of the
#: runner's own time.
GATE_RECHECK_SECONDS = 1.0


class SignalGate:
    """Whether sending a Tasks signal can have any effect right now.

    The Tasks framework connects receivers of its own that only log (INFO, ERROR
    for a failed task) to ``django.tasks`` (``django_tasks`` on the backport).
    When those are the only receivers and their logger would drop the record,
    building a TaskResult and sending ``task_started``/``task_finished`` does
    nothing but cost a noticeable share of a short task's time, so the runner
    skips both. Any other receiver, or a handler that would write the record,
    and the signal is sent exactly as before.

    "Would write" follows the record up the logger hierarchy like ``logging``
    does: a handler at or below the level writes it unless one of Django's
    ``RequireDebugTrue``/``RequireDebugFalse`` filters rules it out for the current
    ``DEBUG`` (any other filter is assumed to let it through). Django's default
    logging sends ``django.*`` INFO records to a console handler that only writes
    when ``DEBUG`` is on, so in production they are built and then dropped.

    An answer is reused for ``recheck_seconds``, unless the signal's receivers
    changed meanwhile: a logging change made while a worker runs takes effect
    within that time.
    """

    def __init__(self, signal: Any, recheck_seconds: float = GATE_RECHECK_SECONDS) -> None:
        self.signal = signal
        self.recheck_seconds = recheck_seconds
        # level -> (answer, receivers' fingerprint, monotonic time it expires)
        self._answers: dict[int, tuple[bool, tuple[int, Any], float]] = {}
        module = importlib.import_module(f"{TASKS_MODULE}.signals")
        self.builtin = {
            getattr(module, name, None)
            for name in ("log_task_enqueued", "log_task_started", "log_task_finished")
        } - {None}
        self.logger: logging.Logger = getattr(module, "logger", logging.getLogger(TASKS_MODULE))
        self._keys: tuple[Any, ...] | None = None
        self._others = True
        self._emits: dict[tuple[Any, ...], bool] = {}

    def _chain_key(self, level: int) -> tuple[Any, ...]:
        """What decides whether a record at ``level`` is written (cheap to build)."""
        key: list[Any] = [level, settings.DEBUG]
        logger: logging.Logger | None = self.logger
        while logger is not None:
            key.append((logger.level, logger.propagate, logger.disabled))
            for handler in logger.handlers:
                key.append((id(handler), handler.level, len(handler.filters)))
            if not logger.propagate:
                break
            logger = logger.parent
        return tuple(key)

    def _writes(self, level: int) -> bool:
        if not self.logger.isEnabledFor(level):
            return False
        key = self._chain_key(level)
        known = self._emits.get(key)
        if known is None:
            known = self._emits[key] = self._would_write(level)
        return known

    def _would_write(self, level: int) -> bool:
        from django.utils.log import RequireDebugFalse, RequireDebugTrue

        found = False
        logger: logging.Logger | None = self.logger
        while logger is not None:
            for handler in logger.handlers:
                found = True
                if level < handler.level:
                    continue
                if any(
                    (isinstance(f, RequireDebugTrue) and not settings.DEBUG)
                    or (isinstance(f, RequireDebugFalse) and settings.DEBUG)
                    for f in handler.filters
                ):
                    continue
                return True
            if not logger.propagate:
                break
            logger = logger.parent
        # No handler at all: logging.lastResort writes WARNING and above.
        return not found and level >= logging.WARNING

    def wanted(self, level: int) -> bool:
        receivers = self.signal.receivers
        # Connecting or disconnecting changes the list's length or its last entry.
        fingerprint = (len(receivers), receivers[-1][0] if receivers else None)
        now = time.monotonic()
        known = self._answers.get(level)
        if known is not None and known[1] == fingerprint and now < known[2]:
            return known[0]
        answer = self._wanted(level)
        self._answers[level] = (answer, fingerprint, now + self.recheck_seconds)
        return answer

    def _wanted(self, level: int) -> bool:
        keys = tuple(entry[0] for entry in self.signal.receivers)
        if keys != self._keys:
            others = False
            for entry in self.signal.receivers:
                receiver = entry[1]
                if isinstance(receiver, weakref.ReferenceType):
                    receiver = receiver()
                if receiver is not None and receiver not in self.builtin:
                    others = True
                    break
            self._keys, self._others = keys, others
        return self._others or self._writes(level)
