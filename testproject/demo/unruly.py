"""Tasks that misbehave toward their worker: raise what tasks should not, overrun their
timeout, ignore or heed an abort. The supervision tests run them."""

from __future__ import annotations

import os
import threading
import time

from django_pgqueue import current_attempt
from django_pgqueue.compat import task

#: A test sets it to let every ``stuck`` task return, so no thread outlives the test.
release = threading.Event()


@task()
def raise_system_exit() -> None:
    raise SystemExit(3)


@task()
def raise_keyboard_interrupt() -> None:
    raise KeyboardInterrupt


def _down(depth: int) -> int:
    return _down(depth + 1) + 1


@task()
def recurse_forever() -> int:
    return _down(0)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RecursionError("the message of this exception cannot be rendered")


@task()
def raise_unprintable() -> None:
    raise Unprintable


@task(timeout=0.5, max_attempts=3)
def stuck(label: str) -> str:
    """Ignores its timeout and any abort; returns only once ``release`` is set."""
    _record(label)
    release.wait(60)
    return label


@task(timeout=0.5, max_attempts=1)
def stuck_once(label: str) -> str:
    """``stuck`` with one attempt: only the child that claims it keeps a stuck thread."""
    return stuck.func(label)


@task(takes_context=True)
def cooperative(context, label: str) -> str:
    """Works until its attempt is given up, then writes what it saw and returns."""
    _record(f"start:{label}")
    while not context.is_aborted():
        time.sleep(0.02)
    attempt = current_attempt()
    seen = "deadline" if context.deadline is not None else "no deadline"
    _record(f"stopped:{label}:{seen}:{attempt is not None and attempt.is_aborted()}")
    return "stopped"


def _record(label: str) -> None:
    from .models import TaskRun

    attempt = current_attempt()
    job_id = int(attempt.item.id) if attempt is not None else 0
    attempts = attempt.item.attempts if attempt is not None else 0
    TaskRun.objects.create(job_id=job_id, attempt=attempts, pid=os.getpid(), label=label)
