"""The scheduler: turns due ticks of declared schedules into jobs, in every worker.

There is no leader. Each pass, every worker process does, per schedule and in one
transaction of its own on the queue database: read the schedule's cursor (the last
tick enqueued) and pause flag; work out the due ticks from the catch-up policy;
insert each tick's row (the unique (schedule, instant) constraint lets exactly one
transaction through, see ``store.claim_tick``) and, only if it got the row, enqueue
the job; then move the cursor forward. A worker killed mid-pass rolls back its
tick row and job together, and the next pass of any worker enqueues the tick. One
schedule that fails (its task gone, arguments that cannot be stored) is logged with
its name and rolled back alone; the others tick.

This module decides; ``periodic/store.py`` writes every schedule and tick row.

"Now" is the database's ``now()`` (hosts' clocks do not matter), or the clock a
test injects.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
from collections.abc import Callable

from django.db import close_old_connections, connections, transaction

from .. import sql
from ..backend import resolve_task
from ..conf import get_settings
from ..exceptions import DuplicateJob
from ..worker import hooks
from . import cron, store
from .registry import declared_schedules
from .spec import ArgumentLimits, ScheduleSpec, validate_entry

logger = logging.getLogger("django_pgqueue.scheduler")

#: A schedule failing the same way again is logged at most once per this many seconds
#: (a pass runs every SCHEDULER_INTERVAL, 2 s by default: a broken schedule would
#: otherwise fill the log); a new kind of failure is logged at once.
REPEAT_FAILURE_LOG_SECONDS = 600.0

#: Most missed ticks one pass enqueues under catch_up "all"; the rest follow on
#: the next passes (a long downtime never makes one huge transaction).
MAX_TICKS_PER_PASS = 100

Clock = Callable[[], dt.datetime]


class Scheduler:
    """One scheduler: ``sync()`` once, then ``run_pass()`` every interval."""

    def __init__(
        self,
        schedules: dict[str, ScheduleSpec] | None = None,
        *,
        clock: Clock | None = None,
        worker_id: str = "",
    ) -> None:
        conf = get_settings()
        self.schedules = declared_schedules() if schedules is None else schedules
        self.clock = clock
        self.worker_id = worker_id
        self.db = conf.DATABASE
        self.default_catch_up = conf.SCHEDULE_CATCH_UP
        self.grace = dt.timedelta(seconds=conf.SCHEDULE_GRACE_SECONDS)
        self.test_hooks = hooks.armed_points()
        self.enqueued = 0
        #: Per schedule: (the last failure logged, when).
        self._failures: dict[str, tuple[str, float]] = {}

    def now(self) -> dt.datetime:
        if self.clock is not None:
            return self.clock()
        with connections[self.db].cursor() as cursor:
            cursor.execute(sql.DATABASE_NOW)
            now: dt.datetime = cursor.fetchone()[0]
        return now

    def sync(self) -> None:
        """Write every declared schedule's definition to its row (for the admin).

        Each schedule in its own transaction: one that cannot be stored (a spec that
        skipped the checks, a row another version wrote) is logged, naming it, and
        the others are declared and tick all the same.
        """
        now = self.now()
        for spec in self.schedules.values():
            try:
                with transaction.atomic(using=self.db):
                    self._declare(spec, now)
            except Exception as exc:
                self._log_failure(spec.name, exc, "could not be declared; it does not tick")

    def _declare(self, spec: ScheduleSpec, now: dt.datetime) -> None:
        store.declare(
            spec,
            catch_up=spec.catch_up or self.default_catch_up,
            next_tick=cron.next_tick(spec.cron, spec.timezone, now),
            now=now,
        )

    def run_pass(self) -> int:
        """Enqueue every due tick of every schedule; returns the jobs this pass enqueued."""
        now = self.now()
        enqueued = 0
        for spec in self.schedules.values():
            try:
                enqueued += self._run_schedule(spec, now)
            except Exception as exc:
                self._log_failure(spec.name, exc, "pass failed; it is retried next pass")
            else:
                self._failures.pop(spec.name, None)
        self.enqueued += enqueued
        return enqueued

    def _log_failure(self, name: str, exc: Exception, what: str) -> None:
        """Log a schedule's failure with its name and traceback; the same failure again
        only every REPEAT_FAILURE_LOG_SECONDS (the other schedules keep ticking)."""
        kind = f"{type(exc).__name__}: {exc}"
        seen = self._failures.get(name)
        now = time.monotonic()
        if seen is not None and seen[0] == kind and now - seen[1] < REPEAT_FAILURE_LOG_SECONDS:
            return
        self._failures[name] = (kind, now)
        logger.error("Schedule %r: %s", name, what, exc_info=exc)

    def _due(
        self, spec: ScheduleSpec, cursor_at: dt.datetime, now: dt.datetime
    ) -> tuple[list[dt.datetime], dt.datetime | None]:
        """(ticks to enqueue, the new cursor) under the schedule's catch-up policy."""
        policy = spec.catch_up or self.default_catch_up
        if policy == "all":
            ticks, more = cron.due_ticks(
                spec.cron, spec.timezone, cursor_at, now, MAX_TICKS_PER_PASS
            )
            if more:
                logger.warning(
                    "Schedule %r: more than %d missed ticks; enqueueing them %d per pass",
                    spec.name,
                    MAX_TICKS_PER_PASS,
                    MAX_TICKS_PER_PASS,
                )
            return ticks, (ticks[-1] if ticks else None)
        latest = cron.latest_tick(spec.cron, spec.timezone, cursor_at, now)
        if latest is None:
            return [], None
        if policy == "none" and now - latest > self.grace:
            return [], latest  # missed: skipped, and the cursor moves past it
        return [latest], latest

    def _run_schedule(self, spec: ScheduleSpec, now: dt.datetime) -> int:
        """One schedule's due ticks, in one transaction of its own (run_pass logs its
        failure and goes on with the next schedule)."""
        with transaction.atomic(using=self.db):
            state = store.read_state(spec.name)
            if state is None:
                # Deleted from the admin (or never synced): declare it again; its
                # ticks count from now.
                self._declare(spec, now)
                return 0
            paused, cursor_at = state
            ticks, new_cursor = self._due(spec, cursor_at, now)
            if new_cursor is None:
                return 0
            if paused:
                ticks = []  # a paused schedule skips its ticks
            enqueued = 0
            last_job: int | None = None
            for tick in ticks:
                tick_id = store.claim_tick(spec.name, tick)
                if tick_id is None:
                    continue  # another worker enqueued this tick
                if "scheduler_tick" in self.test_hooks:
                    hooks.pause("scheduler_tick", spec.name, tick.isoformat())
                last_job = self._enqueue(spec)
                store.set_tick_job(tick_id, last_job)
                enqueued += 1
                logger.info(
                    "Schedule %r: tick %s enqueued as job %s", spec.name, tick.isoformat(), last_job
                )
            store.advance(
                spec.name,
                tick=new_cursor,
                job_id=last_job,
                next_tick=cron.next_tick(spec.cron, spec.timezone, max(now, new_cursor)),
                now=now,
            )
        return enqueued

    def _enqueue(self, spec: ScheduleSpec) -> int | None:
        """Enqueue one tick's job in the current transaction; its id."""
        task = resolve_task(spec.task_path)
        if spec.queue_name:
            task = task.using(queue_name=spec.queue_name)
        try:
            result = task.enqueue(*spec.args, **spec.kwargs)
        except DuplicateJob as exc:
            # A unique task whose previous run is still live: this tick is that job.
            return exc.job_id
        return int(result.id)


def run_now(schedule_id: int) -> tuple[str, int | None]:
    """Enqueue one run of a schedule's task now, outside its cron; (name, job id).

    The run is the schedule's own call (task, arguments, queue) enqueued the way a
    tick enqueues it (``Scheduler._enqueue``: a unique task whose run is still live
    answers with that run's job), but it is not a tick: the cursor, the next run
    and the tick log stay as they are, so the cron's own runs are neither skipped
    nor doubled; it writes no schedule row, only the job (through the job store).
    Raises ``Schedule.DoesNotExist`` for an unknown id. The row is read back with the
    checks a schedule is declared by (``spec.validate_entry``): one changed by SQL
    past them raises ImproperlyConfigured naming the column, and a task path that
    does not import raises ImportError or NotATask; nothing is enqueued then.
    """
    from ..models.schedule import Schedule

    db = get_settings().DATABASE
    with transaction.atomic(using=db):
        row = Schedule.objects.using(db).get(pk=schedule_id)
        entry = {
            "task": row.task_path,
            "cron": row.cron,
            "timezone": row.timezone,
            "args": row.args,
            "kwargs": row.kwargs,
        }
        if row.queue_name:
            entry["queue_name"] = row.queue_name
        spec = validate_entry(
            row.name,
            entry,
            f"Schedule {row.name!r}",
            row.origin,
            ArgumentLimits.of(get_settings()),
        )
        return row.name, Scheduler({})._enqueue(spec)


class SchedulerThread(threading.Thread):
    """Runs a Scheduler every ``PGQUEUE["SCHEDULER_INTERVAL"]`` seconds until ``stopping``."""

    def __init__(self, scheduler: Scheduler, stopping: threading.Event, interval: float) -> None:
        super().__init__(name="pgqueue-scheduler", daemon=True)
        self.scheduler = scheduler
        self.stopping = stopping
        self.interval = interval

    def run(self) -> None:
        synced = False
        try:
            while not self.stopping.is_set():
                try:
                    if not synced:
                        self.scheduler.sync()
                        synced = True
                        # Logged once the schedules are declared, their cursors taken
                        # from the clock: from here on, a tick after now is enqueued.
                        names = self.scheduler.schedules
                        logger.info(
                            "Scheduler started with %d schedule(s): %s",
                            len(names),
                            ", ".join(names),
                        )
                    self.scheduler.run_pass()
                except Exception:
                    logger.exception("Scheduler pass failed; retrying in %.1f s", self.interval)
                    connections[self.scheduler.db].close()
                close_old_connections()
                self.stopping.wait(self.interval)
        finally:
            connections.close_all()


def test_clock() -> Clock | None:
    """A clock read from the file named by ``PGQUEUE_TEST_CLOCK_FILE`` (an ISO instant).

    Test-only, like the pause points: it needs ``PGQUEUE["TEST_HOOKS"] = True``
    too, so an environment variable alone never moves a production scheduler's time.
    """
    path = os.environ.get("PGQUEUE_TEST_CLOCK_FILE")
    if not path or not get_settings().TEST_HOOKS:
        return None

    def read() -> dt.datetime:
        with open(path) as f:
            return dt.datetime.fromisoformat(f.read().strip())

    return read


def start_scheduler(stopping: threading.Event, worker_id: str) -> SchedulerThread | None:
    """Start this process's scheduler thread, or None when nothing is scheduled."""
    schedules = declared_schedules()
    if not schedules:
        return None
    scheduler = Scheduler(schedules, clock=test_clock(), worker_id=worker_id)
    thread = SchedulerThread(scheduler, stopping, get_settings().SCHEDULER_INTERVAL)
    thread.start()
    return thread
