"""``PgQueueBackend``: Django's Tasks framework, stored in PostgreSQL.

``enqueue()`` writes one row through the Django connection of the queue
database, so the job exists if and only if the caller's transaction commits.
Workers (``manage.py runworkers``) claim and run the rows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal, cast, overload

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, transaction
from django.utils.module_loading import import_string

from . import bulk
from .compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
)
from .conf import PgQueueSettings, get_settings, validate_backend_options
from .contract import check_arguments
from .docs import check_hint
from .error_history import error_entries
from .exceptions import DuplicateJob, NotATask, StoredJSONNotDecodable
from .jobs import store
from .models.queue import Status
from .notify import WAKE_ATOMIC, WAKE_JOBS, wake_workers
from .queues import validate_concurrency_key
from .retry import Backoff, default_backoff
from .routers import warn_if_outside_queue_transaction
from .signal_gate import SignalGate
from .stored_json import decode
from .tracing import traced_enqueue
from .unique import unique_key_for, validate_unique_key


@dataclass(frozen=True, slots=True)
class JobResult(TaskResult):  # type: ignore[misc]  # TaskResult is a frozen dataclass
    """The TaskResult ``get_result`` returns, with the job's ``metadata``: what the
    Tasks API has no field for. Today ``progress`` (0 to 1), ``progress_message``
    and ``progress_at``, once the task reported any (``context.set_progress``)."""

    metadata: dict[str, Any] = field(default_factory=dict)


def _metadata(job: Any) -> dict[str, Any]:
    if job.progress is None:
        return {}
    return {
        "progress": job.progress,
        "progress_message": job.progress_message or "",
        "progress_at": job.progress_at,
    }


#: Our states as the Tasks framework sees them (docs/tasks.md explains the choice).
STATUS_MAP: dict[str, Any] = {
    Status.PENDING: TaskResultStatus.READY,
    # A retry is scheduled: the task is "ready to be executed again".
    Status.FAILED: TaskResultStatus.READY,
    Status.IN_PROGRESS: TaskResultStatus.RUNNING,
    Status.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    Status.DEAD: TaskResultStatus.FAILED,
    Status.CANCELLED: TaskResultStatus.FAILED,
    # A workflow step waiting for its parents: queued, not yet claimable.
    Status.WAITING: TaskResultStatus.READY,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class PgQueueTask(Task):
    """A Task with per-task retry, uniqueness and atomicity options.

    ``@task(max_attempts=8, backoff=my_backoff, timeout=30)`` sets the retry options and
    the time limit; ``None`` means the backend's ``OPTIONS["MAX_ATTEMPTS"]`` /
    ``OPTIONS["BACKOFF"]`` / ``OPTIONS["TIMEOUT"]``. ``timeout`` is in seconds
    (docs/worker.md, "Time limits").

    ``@task(unique=True)`` keeps at most one live job per task and arguments;
    ``task.using(unique_key="order-42")`` names the key per call instead. A second
    enqueue while a job with the key is live returns that job's result, or raises
    :class:`~django_pgqueue.exceptions.DuplicateJob` with ``on_duplicate="raise"``
    (docs/unique-tasks.md).

    ``@task(atomic=True)`` runs the task inside the transaction that claims and
    completes its row (docs/atomic-tasks.md).

    ``@task(concurrency_key="reports")`` or ``task.using(concurrency_key="customer-42")``
    names the key its queue's ``key_concurrency`` limit counts (docs/flow-control.md).
    """

    max_attempts: int | None = None
    backoff: Backoff | None = None
    timeout: float | None = None
    unique: bool = False
    unique_key: str | None = None
    on_duplicate: Literal["return", "raise"] = "return"
    atomic: bool = False
    concurrency_key: str | None = None

    def using(
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: datetime | None = None,
        backend: str | None = None,
        unique_key: str | None = None,
        concurrency_key: str | None = None,
    ) -> PgQueueTask:
        """Task.using, plus ``unique_key`` (at most one live job of this task with it)
        and ``concurrency_key`` (the key its queue's per-key limit counts)."""
        task = cast(
            PgQueueTask,
            Task.using(
                self, priority=priority, queue_name=queue_name, run_after=run_after, backend=backend
            ),
        )
        if unique_key is not None:
            task = replace(task, unique_key=unique_key)
        if concurrency_key is not None:
            task = replace(task, concurrency_key=concurrency_key)
        return task


def _positive_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and 0 < value < 2**31


#: The stored JSON of a call without arguments.
_NO_ARGUMENTS = ("[]", "{}")
_NO_ARGUMENTS_BYTES = 4


def serialize_arguments(
    task: Task,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    conf: PgQueueSettings | None = None,
    *,
    item: int | None = None,
) -> tuple[str, str]:
    """Encode a task's arguments as JSON, or raise an error naming the bad argument.

    Only JSON is ever stored (never pickle): workers may run other code versions,
    and rows must stay readable in the admin and from SQL. The input contract
    (``contract.py``) is checked here, before any SQL: a refused call writes
    nothing and leaves the caller's transaction usable. ``item`` is the position of
    the call in a bulk enqueue, for the message.
    """
    conf = conf or get_settings()
    # A call without arguments, the most common: the contract accepts "[]" and
    # "{}" under any limits the settings allow (depth >= 1) but a byte limit below 4.
    if (
        type(args) is tuple
        and not args
        and type(kwargs) is dict
        and not kwargs
        and conf.MAX_ARGS_BYTES >= _NO_ARGUMENTS_BYTES
    ):
        return _NO_ARGUMENTS
    context = f"Cannot enqueue {task.module_path}"
    if item is not None:
        context += f" (item {item} of the bulk enqueue)"
    return check_arguments(
        args, kwargs, max_bytes=conf.MAX_ARGS_BYTES, max_depth=conf.MAX_JSON_DEPTH, context=context
    )


def resolve_task(task_path: str) -> Task:
    """Import the Task stored at ``task_path``.

    Raises ImportError when the path does not import (for example during a rolling
    deploy) and NotATask when it imports to something that is not a Task.
    """
    try:
        obj = import_string(task_path)
    except ImportError:
        raise
    except Exception as exc:  # a module that fails while importing
        raise ImportError(f"Importing {task_path!r} failed: {exc!r}") from exc
    if not isinstance(obj, Task):
        raise NotATask(
            f"{task_path!r} imports to a {type(obj).__name__}, not a Task; only "
            f"functions decorated with @task can run."
        )
    return obj


class PgQueueBackend(BaseTaskBackend):
    """A Tasks backend that stores jobs in PostgreSQL and runs them with ``runworkers``.

    ``OPTIONS``: ``MAX_ATTEMPTS`` (default 5), ``BACKOFF`` (a callable or its
    dotted path; default exponential with full jitter), ``BACKOFF_BASE`` (2 s)
    and ``BACKOFF_CAP`` (3600 s) for the default backoff, ``TIMEOUT`` (seconds an
    attempt may run; default None, no limit).
    """

    task_class = PgQueueTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        if "QUEUES" in params and not params["QUEUES"]:
            self.queues = set()  # empty = any queue name
        self._validated: dict[int, Task] = {}
        # Problems are reported by check() (E010) and on enqueue, not raised here:
        # Django builds task backends lazily, where an exception would be confusing.
        options, self._option_errors = validate_backend_options(alias, self.options)
        self.max_attempts: int = options["MAX_ATTEMPTS"]
        self.timeout: float | None = options["TIMEOUT"]
        self.backoff: Backoff = options["BACKOFF"] or default_backoff(
            options["BACKOFF_BASE"], options["BACKOFF_CAP"]
        )

    # -- configuration -------------------------------------------------------------

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        return [
            checks.Error(
                message,
                hint=check_hint("django_pgqueue.E010"),
                id="django_pgqueue.E010",
                obj=f"TASKS[{self.alias!r}]",
            )
            for message in self._option_errors
        ]

    def _raise_if_misconfigured(self) -> None:
        if self._option_errors:
            raise ImproperlyConfigured(self._option_errors[0])

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        max_attempts = getattr(task, "max_attempts", None)
        if max_attempts is not None and (
            isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
        ):
            raise InvalidTask(f"max_attempts must be a positive integer, got {max_attempts!r}")
        backoff = getattr(task, "backoff", None)
        if backoff is not None and not callable(backoff):
            raise InvalidTask(
                f"backoff must be a callable backoff(exception, task_result) -> seconds | None, "
                f"got {backoff!r}"
            )
        validate_unique_key(getattr(task, "unique_key", None))
        try:
            validate_concurrency_key(getattr(task, "concurrency_key", None))
        except ValueError as exc:
            raise InvalidTask(str(exc)) from None
        if getattr(task, "on_duplicate", "return") not in ("return", "raise"):
            raise InvalidTask(
                f"on_duplicate must be 'return' or 'raise', got {task.on_duplicate!r}"  # type: ignore[attr-defined]
            )
        timeout = getattr(task, "timeout", None)
        if timeout is not None and not _positive_number(timeout):
            raise InvalidTask(f"timeout must be a positive number of seconds, got {timeout!r}")

    def _validate_once(self, task: Task) -> None:
        """``validate_task``, once per Task object.

        A Task is frozen and what validate_task checks is the task's own options and
        this backend's configuration, so a task that passed passes again; a busy
        ``task.enqueue()`` no longer checks the same object thousands of times. The
        Task objects are held (a few hundred at most), so their ids cannot be
        reused by another object meanwhile.
        """
        if self._validated.get(id(task)) is task:
            return
        self.validate_task(task)
        if len(self._validated) >= 256:
            self._validated.clear()
        self._validated[id(task)] = task

    def _new_jobs(self, task: Task) -> store.NewJobs:
        """The columns the jobs of ``task`` are written with (the arguments apart)."""
        return store.NewJobs(
            task.priority,
            self.max_attempts_for(task),
            task.run_after,
            task.module_path,
            task.queue_name,
            self.alias,
        )

    def max_attempts_for(self, task: Task) -> int:
        return getattr(task, "max_attempts", None) or self.max_attempts

    def backoff_for(self, task: Task) -> Backoff:
        return getattr(task, "backoff", None) or self.backoff

    def timeout_for(self, task: Task) -> float | None:
        """Seconds an attempt of ``task`` may run (None: no limit)."""
        return getattr(task, "timeout", None) or self.timeout

    # -- enqueue -------------------------------------------------------------------

    @traced_enqueue
    def enqueue(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> TaskResult:
        """Write one job in the caller's transaction and return its READY result."""
        self._raise_if_misconfigured()
        self._validate_once(task)
        if getattr(task, "atomic", False):
            # Checked here rather than in validate_task(), which also runs when
            # @task decorates: a project that moves its queue must still import.
            problem = atomic_database_problem()
            if problem:
                raise InvalidTask(f"{task.module_path}: atomic=True cannot work here: {problem}")
        conf = get_settings()
        args_json, kwargs_json = serialize_arguments(task, args, kwargs, conf)
        # Built before the INSERT: nothing that can fail runs after the row exists.
        result = self._new_result(task, args, kwargs)
        db = conf.DATABASE
        warn_if_outside_queue_transaction(db, "enqueue()", stacklevel=3)
        unique_key = unique_key_for(task, args, kwargs)
        atomic = bool(getattr(task, "atomic", False))
        concurrency_key = getattr(task, "concurrency_key", None)
        new = self._new_jobs(task)
        if unique_key is not None or atomic or concurrency_key is not None:
            job_id, created_at = store.insert_keyed(
                db,
                new,
                args_json,
                kwargs_json,
                unique_key=unique_key,
                atomic=atomic,
                concurrency_key=concurrency_key,
            )
            if created_at is None:
                return self._duplicate(task, job_id, unique_key)
        else:
            job_id, created_at = store.insert(
                db, new, args_json, kwargs_json, prepare=conf.PREPARED_STATEMENTS
            )
        _written(result, job_id, created_at)
        if task.run_after is None:
            # Deferred jobs are found by the poll when due.
            wake_workers(db, payload=WAKE_ATOMIC if atomic else WAKE_JOBS)
        if _enqueued_wanted():
            task_enqueued.send(type(self), task_result=result)
        return result

    def step_row(
        self,
        task: Task,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        *,
        name: str,
        policy: str,
        parents: int,
    ) -> store.NewStep:
        """One workflow step's row, checked and serialised as :meth:`enqueue` does (no
        SQL: ``workflows.Workflow.enqueue`` writes all the steps at once). A step keeps
        its task's options (queue, priority, retries, timeout, atomic, concurrency
        key). A unique task cannot be a step: the workflow is what is unique.
        """
        self._raise_if_misconfigured()
        self._validate_once(task)
        atomic = bool(getattr(task, "atomic", False))
        if atomic:
            problem = atomic_database_problem()
            if problem:
                raise InvalidTask(f"{task.module_path}: atomic=True cannot work here: {problem}")
        if unique_key_for(task, args, kwargs) is not None:
            raise InvalidTask(
                f"{task.module_path}: a unique task cannot be a workflow step "
                "(make the workflow unique instead)"
            )
        args_json, kwargs_json = serialize_arguments(task, args, kwargs, get_settings())
        return store.NewStep(
            self._new_jobs(task),
            args_json,
            kwargs_json,
            name,
            policy,
            parents,
            atomic=atomic,
            concurrency_key=getattr(task, "concurrency_key", None),
        )

    def _duplicate(self, task: Task, live_id: int, unique_key: str | None) -> TaskResult:
        """The answer to an enqueue whose unique key a live job holds: that job's
        result, or DuplicateJob with ``on_duplicate="raise"``."""
        if getattr(task, "on_duplicate", "return") == "raise":
            raise DuplicateJob(
                f"{task.module_path} already has a live job ({live_id}) with unique key "
                f"{unique_key!r}",
                job_id=live_id,
            )
        return self.get_result(str(live_id))

    @overload
    def enqueue_many(
        self,
        task: Task,
        arguments: Iterable[tuple[Sequence[Any], dict[str, Any]]],
        *,
        results: Literal[True] = ...,
    ) -> list[TaskResult]: ...

    @overload
    def enqueue_many(
        self,
        task: Task,
        arguments: Iterable[tuple[Sequence[Any], dict[str, Any]]],
        *,
        results: Literal[False],
    ) -> list[int]: ...

    @overload
    def enqueue_many(
        self,
        task: Task,
        arguments: Iterable[tuple[Sequence[Any], dict[str, Any]]],
        *,
        results: bool,
    ) -> list[TaskResult] | list[int]: ...

    def enqueue_many(
        self,
        task: Task,
        arguments: Iterable[tuple[Sequence[Any], dict[str, Any]]],
        *,
        results: bool = True,
    ) -> list[TaskResult] | list[int]:
        """Write many jobs of one task with one statement (COPY for large batches).

        All rows are written or none, in the caller's transaction. Unique and
        atomic tasks are written one row at a time (each key must be settled by
        the unique index on its own). With ``results=False`` the job ids come
        back instead of READY results (see :func:`enqueue_many`).
        """
        self._raise_if_misconfigured()
        self._validate_once(task)
        conf = get_settings()
        if (
            getattr(task, "unique", False)
            or getattr(task, "unique_key", None) is not None
            or getattr(task, "atomic", False)
            or getattr(task, "concurrency_key", None) is not None
        ):
            items = [(tuple(a), dict(k)) for a, k in arguments]
            with transaction.atomic(using=conf.DATABASE):
                made = [self.enqueue(task, a, k) for a, k in items]
            return made if results else [int(r.id) for r in made]
        # Every call is checked before any SQL (bulk.py: repeated argument objects
        # in a list are checked and serialised once).
        runs = bulk.encode_calls(
            arguments, lambda a, k, item: serialize_arguments(task, a, k, conf, item=item)
        )
        if not bulk.count_of(runs):
            return []
        db = conf.DATABASE
        warn_if_outside_queue_transaction(db, "enqueue_many()", stacklevel=3)
        new = self._new_jobs(task)
        ids, created_at = store.insert_many(db, new, runs)
        if task.run_after is None:
            wake_workers(db, payload=WAKE_ATOMIC if getattr(task, "atomic", False) else WAKE_JOBS)
        # Results only for a caller or a receiver that will read them.
        wanted = _enqueued_wanted()
        if not (results or wanted):
            return list(ids)
        made = bulk.results_for(runs, ids, created_at, lambda a, k: self._new_result(task, a, k))
        if wanted:
            for result in made:
                task_enqueued.send(type(self), task_result=result)
        return made if results else list(ids)

    def _new_result(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> TaskResult:
        """The READY result of a job about to be written; ``_written`` fills in its row."""
        return TaskResult(
            task=task,
            id="",
            status=TaskResultStatus.READY,
            enqueued_at=None,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

    # -- results -------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult:
        """Read a job's current state as a TaskResult; unknown ids raise TaskResultDoesNotExist."""
        try:
            job_id = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        job = store.read(get_settings().DATABASE, job_id)
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        try:
            task = resolve_task(job.task_path)
        except (ImportError, NotATask) as exc:
            raise InvalidTask(
                f"Job {job_id} refers to {job.task_path!r}, which is not an importable Task "
                f"here: {exc}"
            ) from exc
        task = self._task_as_enqueued(task, job.queue_name, job.priority, job.backend)
        try:
            return self._result_of(job_id, job, task)
        except StoredJSONNotDecodable as exc:
            raise StoredJSONNotDecodable(
                f"Job {job_id} holds JSON Python cannot read back ({exc}); it was written "
                "past enqueue(), which refuses it"
            ) from None

    def _result_of(self, job_id: int, job: Any, task: Task) -> TaskResult:
        result: TaskResult = JobResult(
            metadata=_metadata(job),
            task=task,
            id=str(job_id),
            status=STATUS_MAP[job.status],
            enqueued_at=job.created_at,
            started_at=job.started_at,
            last_attempted_at=job.last_attempted_at,
            finished_at=job.finished_at,
            args=decode(job.args),
            kwargs=decode(job.kwargs),
            backend=job.backend,
            errors=task_errors(job.errors),
            worker_ids=list(decode(job.worker_ids) or []),
        )
        if job.status == Status.SUCCEEDED:
            object.__setattr__(result, "_return_value", decode(job.result))
        return result

    @staticmethod
    def _task_as_enqueued(task: Task, queue_name: str, priority: int, backend: str) -> Task:
        if (task.queue_name, task.priority, task.backend) == (queue_name, priority, backend):
            return task
        return task.using(queue_name=queue_name, priority=priority, backend=backend)


def atomic_database_problem() -> str | None:
    """Why atomic tasks cannot be exactly-once here, or None.

    An atomic task's claim and completion run on the queue database
    (``PGQUEUE["DATABASE"]``); the task's own ORM writes go to ``default`` unless
    a router says otherwise. When the two aliases name different databases, those
    writes are outside the claim's transaction and nothing is exactly-once.
    """
    from django.conf import settings

    queue_db = get_settings().DATABASE
    if queue_db == DEFAULT_DB_ALIAS:
        return None
    databases = settings.DATABASES
    if queue_db not in databases or DEFAULT_DB_ALIAS not in databases:
        return None  # E002 reports a missing alias
    where = ("NAME", "HOST", "PORT")
    queue_at = tuple(databases[queue_db].get(k) or "" for k in where)
    default_at = tuple(databases[DEFAULT_DB_ALIAS].get(k) or "" for k in where)
    if queue_at == default_at:
        return None
    return (
        f"PGQUEUE['DATABASE'] is {queue_db!r}, a different database from "
        f"{DEFAULT_DB_ALIAS!r} where the task's writes go; only writes on the queue's "
        f"database commit together with the job"
    )


def _written(result: TaskResult, job_id: int, created_at: datetime) -> None:
    # TaskResult is frozen; the framework's own backends set fields the same way.
    object.__setattr__(result, "id", str(job_id))
    object.__setattr__(result, "enqueued_at", created_at)


def task_errors(errors: Any) -> list[TaskError]:
    """Our stored error history as the framework's TaskError list (never raises: an
    entry that is not one names the problem, ``error_history.error_entries``)."""
    return [
        TaskError(
            exception_class_path=str(e.get("exception_class_path", "builtins.Exception")),
            traceback=str(e.get("traceback", "")),
        )
        for e in error_entries(errors)
    ]


_enqueued_gate: SignalGate | None = None


def _enqueued_wanted() -> bool:
    """Whether sending ``task_enqueued`` would do anything (``signal_gate.SignalGate``).

    The framework's own receiver logs each enqueue at DEBUG; an enqueue skips the
    signal (a bulk enqueue thousands of them, and building their results) when
    that is the only receiver and its record would be dropped. Any other
    receiver, or a handler that writes DEBUG, and every result is sent as before.
    """
    global _enqueued_gate
    if _enqueued_gate is None:  # built on first use: it reads the framework's signals module
        _enqueued_gate = SignalGate(task_enqueued)
    return bool(_enqueued_gate.wanted(logging.DEBUG))


def get_backend_for(task: Task) -> PgQueueBackend:
    """The PgQueueBackend a task is bound to, or a clear error."""
    backend = task.get_backend()
    if not isinstance(backend, PgQueueBackend):
        raise ImproperlyConfigured(
            f"{task.module_path} uses the {type(backend).__name__} backend "
            f"(TASKS[{task.backend!r}]); enqueue_many needs "
            f"django_pgqueue.backend.PgQueueBackend."
        )
    return backend


@overload
def enqueue_many(
    task: Task,
    arguments: Iterable[tuple[Sequence[Any], dict[str, Any]]],
    *,
    results: Literal[True] = ...,
) -> list[TaskResult]: ...


@overload
def enqueue_many(
    task: Task,
    arguments: Iterable[tuple[Sequence[Any], dict[str, Any]]],
    *,
    results: Literal[False],
) -> list[int]: ...


@overload
def enqueue_many(
    task: Task,
    arguments: Iterable[tuple[Sequence[Any], dict[str, Any]]],
    *,
    results: bool,
) -> list[TaskResult] | list[int]: ...


def enqueue_many(
    task: Task,
    arguments: Iterable[tuple[Sequence[Any], dict[str, Any]]],
    *,
    results: bool = True,
) -> list[TaskResult] | list[int]:
    """Enqueue many calls of ``task`` with one statement; returns their results in order.

    ``arguments`` is an iterable of ``(args, kwargs)`` pairs. All rows are written
    or none, inside the caller's transaction. With ``results=False`` it returns
    the new jobs' ids (``int``, the ``Job`` primary keys, in input order) and
    builds no ``TaskResult`` at all: the faster choice when the caller does not
    read them (``task.get_result(str(job_id))`` reads one later).
    """
    return get_backend_for(task).enqueue_many(task, arguments, results=results)
