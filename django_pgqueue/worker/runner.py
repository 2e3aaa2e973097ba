"""Run one claimed job and turn what happened into a :class:`JobOutcome`.

Nothing here touches the queue tables: outcomes are written in batches by the
completer (``completer.py``), guarded by each row's claim token.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
import traceback
from inspect import iscoroutinefunction
from typing import Any

from django.db import close_old_connections
from django.db.backends.signals import connection_created
from django.utils import timezone

from ..backend import PgQueueBackend, resolve_task, task_errors
from ..compat import (
    Task,
    TaskResult,
    TaskResultStatus,
    task_backends,
    task_finished,
    task_started,
)
from ..exceptions import (
    ArgumentsNotDecodable,
    NotATask,
    PgQueueError,
    StoredJSONNotDecodable,
    TaskAborted,
    TaskTimeout,
    WorkerInterrupted,
)
from ..jobs.rows import ClaimedJob
from ..models.queue import Status
from ..outcomes import JobOutcome
from ..signal_gate import SignalGate
from ..storable import return_value_json
from ..stored_json import decode
from ..tracing import traced_run
from .attempt import AttemptContext, current_attempt

logger = logging.getLogger("django_pgqueue.worker")

#: Retry delay of an attempt whose failure could not go through the task's backoff
#: (the task cannot be resolved, or building its TaskResult failed again).
FALLBACK_RETRY_DELAY = 60.0

#: A task thread that finished a task less than this long ago skips the
#: ``close_old_connections()`` before the next one: the call after that task made
#: the same check moments ago.
CONNECTION_CHECK_SECONDS = 1.0

#: Set in each thread that ever opened a Django database connection. Django's
#: connections are per thread, so a task thread that never opened one has nothing
#: for ``close_old_connections()`` to close: a task that does not use the ORM
#: skips it (on a drain of such tasks it was a third of the runner's time).
_opened = threading.local()


def _connection_opened(sender: Any, **kwargs: Any) -> None:
    _opened.any = True


connection_created.connect(_connection_opened, dispatch_uid="django_pgqueue.runner.opened")


started_gate = SignalGate(task_started)
finished_gate = SignalGate(task_finished)


def _moment(seconds: float | None) -> dt.datetime | None:
    """A claimed row's time (seconds since the epoch, as every claim returns it) as an
    aware datetime."""
    return None if seconds is None else dt.datetime.fromtimestamp(seconds, dt.UTC)


def _error_entry(job: ClaimedJob, worker_id: str, exc_path: str, tb: str) -> dict[str, Any]:
    return {
        "attempt": job.attempts,
        "exception_class_path": exc_path,
        "traceback": tb,
        "at": timezone.now().isoformat(),
        "worker_id": worker_id,
    }


def _exception_path(exc: BaseException) -> str:
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"


def describe_exception(exc: BaseException) -> str:
    """``Class: message``, even for an exception whose ``str()`` itself fails."""
    try:
        text = str(exc)
    except BaseException:  # a hostile __str__ (or one that recurses)
        text = "<message could not be rendered>"
    return f"{type(exc).__name__}: {text}"[:2000]


def _traceback(exc: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(exc))
    except BaseException:
        return describe_exception(exc)


class TaskRunner:
    """Runs jobs for one worker; caches task lookups across jobs."""

    def __init__(
        self, worker_id: str, unknown_task_delay: float, *, manage_connections: bool = True
    ) -> None:
        self.worker_id = worker_id
        self.unknown_task_delay = unknown_task_delay
        #: False when jobs run on the caller's own connection and transaction
        #: (django_pgqueue.testing): closing it would break the test's transaction.
        self.manage_connections = manage_connections
        self._tasks: dict[str, Task] = {}
        self._backends: dict[str, Any] = {}
        # Each task's time limit, by (task path, backend alias): looked up per job.
        self._timeouts: dict[tuple[str, str], float | None] = {}
        # Whether a task function may be called directly (see _callable).
        self._direct: dict[Any, bool] = {}
        self._local = threading.local()

    def _task_for(self, job: ClaimedJob) -> Task:
        task = self._tasks.get(job.task_path)
        if task is None:
            task = resolve_task(job.task_path)
            self._tasks[job.task_path] = task
        if (task.queue_name, task.priority, task.backend) != (
            job.queue_name,
            job.priority,
            job.backend,
        ):
            task = task.using(queue_name=job.queue_name, priority=job.priority, backend=job.backend)
        return task

    def _callable(self, task: Task) -> Any:
        """What runs ``task``: its function itself when ``Task.call`` would only
        check that it is not a coroutine function (asked once per function, not
        per job); ``task.call`` for a coroutine function or a Task subclass that
        overrides ``call``."""
        func = task.func
        direct = self._direct.get(func)
        if direct is None:
            direct = self._direct[func] = type(task).call is Task.call and not (
                iscoroutinefunction(func)
            )
        return func if direct else task.call

    def _backend_for(self, alias: str) -> Any:
        backend = self._backends.get(alias)
        if backend is None:
            backend = self._backends[alias] = task_backends[alias]
        return backend

    def _result(self, job: ClaimedJob, task: Task) -> TaskResult:
        """The RUNNING TaskResult of this attempt (for signals and ``takes_context``)."""
        now = timezone.now()
        return TaskResult(
            task=task,
            id=str(job.id),
            status=TaskResultStatus.RUNNING,
            enqueued_at=_moment(job.created_at),
            started_at=_moment(job.started_at) or now,
            last_attempted_at=_moment(job.last_attempted_at) or now,
            finished_at=None,
            args=decode(job.args),
            kwargs=decode(job.kwargs),
            backend=job.backend,
            errors=task_errors(decode(job.errors)),
            worker_ids=list(decode(job.worker_ids)),
        )

    def release(self, job: ClaimedJob, reason: str, delay: float = 0.0) -> JobOutcome:
        """Give a row back without running it (the attempt is refunded)."""
        return JobOutcome(
            job.id,
            job.token,
            Status.PENDING,
            delay=delay,
            refund=1,
            last_error=reason,
            task_path=job.task_path,
            attempt=job.attempts,
        )

    def interrupted(self, job: ClaimedJob) -> JobOutcome:
        """A running attempt that a shutdown could not wait for: retried at once."""
        exc = WorkerInterrupted(f"worker {self.worker_id} shut down before the task finished")
        return self._bare_failure(job, exc, delay=0.0)

    def failed(self, job: ClaimedJob, exc: BaseException, detail: str = "") -> JobOutcome:
        """An attempt that ended with ``exc`` outside the task's own ``try`` (the
        runner failed around it, or the worker gave it up): recorded like a task
        failure, retried per the task's backoff. Never raises.

        ``detail`` (for instance the stack of a task that overran its timeout) is
        appended to the recorded traceback.
        """
        try:
            task = self._task_for(job)
            backend = self._backend_for(job.backend)
            result = self._result(job, task)
            outcome = self._failure(job, task, backend, result, exc)
        except BaseException:
            logger.exception("Job %s: could not apply the task's backoff to %r", job.id, exc)
            return self._bare_failure(job, exc, detail=detail)
        if detail and outcome.error_json is not None:
            entry = json.loads(outcome.error_json)
            entry["traceback"] += detail
            outcome.error_json = json.dumps(entry)
        return outcome

    def crashed(self, job: ClaimedJob, exc: BaseException) -> JobOutcome:
        """Running the job raised out of the runner itself: a failed attempt."""
        return self.failed(job, exc)

    def timed_out(self, job: ClaimedJob, seconds: float, stack: str = "") -> JobOutcome:
        """The attempt ran past its timeout: failed, retried per the task's backoff."""
        exc = TaskTimeout(f"the task did not finish within its timeout of {seconds:g} s")
        detail = f"\nWhere the task was when it was given up:\n{stack}" if stack else ""
        return self.failed(job, exc, detail)

    def aborted(self, job: ClaimedJob, *, started: bool = True) -> JobOutcome:
        """An operator aborted the job: the attempt ends ``cancelled``."""
        where = "while it was running" if started else "before it started"
        exc = TaskAborted(f"aborted by an operator {where}")
        return self._bare_failure(job, exc, status=Status.CANCELLED)

    def _bare_failure(
        self,
        job: ClaimedJob,
        exc: BaseException,
        *,
        status: str | None = None,
        delay: float = FALLBACK_RETRY_DELAY,
        detail: str = "",
    ) -> JobOutcome:
        """A failed attempt without the task's backoff (nothing here can raise)."""
        if status is None:
            status = Status.DEAD if job.attempts >= job.max_attempts else Status.FAILED
        message = describe_exception(exc)
        entry = _error_entry(job, self.worker_id, _exception_path(exc), _traceback(exc) + detail)
        return JobOutcome(
            job.id,
            job.token,
            status,
            delay=delay if status == Status.FAILED else 0.0,
            error_json=json.dumps(entry),
            last_error=message,
            task_path=job.task_path,
            attempt=job.attempts,
        )

    def _dead_on_arrival(self, job: ClaimedJob, exc: PgQueueError) -> JobOutcome:
        """A row no attempt can run as stored (its task path is not a task, its
        arguments cannot be decoded): ``dead`` at once, with the reason."""
        entry = _error_entry(job, self.worker_id, _exception_path(exc), str(exc))
        return JobOutcome(
            job.id,
            job.token,
            Status.DEAD,
            error_json=json.dumps(entry),
            last_error=f"{type(exc).__name__}: {exc}",
            task_path=job.task_path,
            attempt=job.attempts,
        )

    @traced_run
    def run(self, job: ClaimedJob) -> JobOutcome:
        """Run ``job`` and describe the outcome. Never raises."""
        try:
            task = self._task_for(job)
        except ImportError as exc:
            # A rolling deploy: newer code enqueued a task this worker does not
            # have yet. Put it back for a later (newer) worker; never burn it.
            logger.warning(
                "Job %s: task %r cannot be imported on this worker (%s); offering it again in %ss",
                job.id,
                job.task_path,
                exc,
                self.unknown_task_delay,
            )
            return self.release(
                job,
                f"ImportError: {exc} (task not importable on this worker)",
                delay=self.unknown_task_delay,
            )
        except NotATask as exc:
            return self._dead_on_arrival(job, exc)
        try:
            # Kept decoded on the row too, for its TaskResult (``_result``).
            args = job.args = decode(job.args)
            kwargs = job.kwargs = decode(job.kwargs)
        except StoredJSONNotDecodable as exc:
            return self._dead_on_arrival(
                job,
                ArgumentsNotDecodable(
                    f"job {job.id}: its stored arguments cannot be read back as Python "
                    f"values ({exc}); they were written past enqueue(), which refuses them"
                ),
            )
        backend = self._backend_for(job.backend)
        sender = type(backend)
        attempt = current_attempt()
        if attempt is not None:
            key = (job.task_path, job.backend)
            try:
                timeout = self._timeouts[key]
            except KeyError:
                timeout = self._timeouts[key] = (
                    backend.timeout_for(task) if isinstance(backend, PgQueueBackend) else None
                )
            if timeout is not None:
                attempt.limit_to(timeout)
        # The TaskResult is built only when something will look at it (see
        # SignalGate): a no-op task otherwise spends more time on it than running.
        result: TaskResult | None = None
        send_started = started_gate.wanted(logging.INFO)
        if task.takes_context or send_started:
            result = self._result(job, task)
            if send_started:
                task_started.send(sender=sender, task_result=result)
        local = self._local
        manage_connections = self.manage_connections and getattr(_opened, "any", False)
        if (
            manage_connections
            and time.monotonic() - getattr(local, "checked", 0.0) > CONNECTION_CHECK_SECONDS
        ):
            close_old_connections()
        started = time.perf_counter()
        try:
            if result is not None and task.takes_context:
                value = task.call(AttemptContext(task_result=result, run=attempt), *args, **kwargs)
            else:
                value = self._callable(task)(*args, **kwargs)
            result_json = return_value_json(value)  # an unstorable value fails the attempt
        except BaseException as exc:  # the task's failure (SystemExit from a task too)
            if result is None:
                result = self._result(job, task)
            outcome = self._failure(job, task, backend, result, exc)
            # Sent inside the except block: Django's own receiver logs exc_info.
            self._finished(outcome, result, sender, started, attempt)
        else:
            outcome = JobOutcome(
                job.id,
                job.token,
                Status.SUCCEEDED,
                result_json=result_json,
                task_path=job.task_path,
                attempt=job.attempts,
            )
            if result is None and finished_gate.wanted(logging.INFO):
                result = self._result(job, task)
            if result is None:
                outcome.duration = time.perf_counter() - started
            else:
                object.__setattr__(result, "_return_value", json.loads(result_json))
                object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
                self._finished(outcome, result, sender, started, attempt)
        finally:
            if attempt is not None:
                attempt.flush_progress()  # the latest report, before the outcome
            # Read again: the task may have opened the thread's first connection.
            if self.manage_connections and getattr(_opened, "any", False):
                close_old_connections()
            local.checked = time.monotonic()
        return outcome

    @staticmethod
    def _finished(
        outcome: JobOutcome,
        result: TaskResult,
        sender: Any,
        started: float,
        attempt: Any = None,
    ) -> None:
        outcome.duration = time.perf_counter() - started
        object.__setattr__(result, "finished_at", timezone.now())
        if attempt is not None and attempt.given_up is not None:
            # The worker gave this attempt up (timeout, abort) and recorded it so;
            # whatever the task returned afterwards is discarded, and a SUCCESSFUL
            # here would report an outcome the queue never recorded.
            return
        level = logging.ERROR if result.status == TaskResultStatus.FAILED else logging.INFO
        if finished_gate.wanted(level):
            task_finished.send(sender=sender, task_result=result)

    def _failure(
        self,
        job: ClaimedJob,
        task: Task,
        backend: Any,
        result: TaskResult,
        exc: BaseException,
    ) -> JobOutcome:
        exc_path = _exception_path(exc)
        entry = _error_entry(job, self.worker_id, exc_path, _traceback(exc))
        result.errors.append(task_errors([entry])[0])
        last_error = describe_exception(exc)
        delay: float | None = None
        if job.attempts < job.max_attempts:
            backoff = backend.backoff_for(task) if isinstance(backend, PgQueueBackend) else None
            if backoff is not None:
                try:
                    delay = backoff(exc, result)
                except Exception:
                    logger.exception("Job %s: backoff callable failed; retrying in 60 s", job.id)
                    delay = 60.0
        if delay is None:
            status = Status.DEAD
            object.__setattr__(result, "status", TaskResultStatus.FAILED)
        else:
            status = Status.FAILED
            object.__setattr__(result, "status", TaskResultStatus.READY)
        return JobOutcome(
            job.id,
            job.token,
            status,
            delay=max(0.0, float(delay or 0.0)),
            error_json=json.dumps(entry),
            last_error=last_error,
            task_path=job.task_path,
            attempt=job.attempts,
        )
