"""Every write to schedule and tick rows: the scheduler's and the operators'.

The scheduler (``periodic/scheduler.py``) decides *when* a tick is due and
enqueues its job; this module is the only code that inserts or changes
``Schedule`` and ``ScheduleTick`` rows, with the statements of
``sql/periodic.py``. The scheduler's functions run in the transaction the
scheduler opened (a tick row and its job commit together); ``set_paused`` and
``delete`` are the admin's and open their own.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from django.db import connections, transaction

from .. import sql
from ..conf import get_settings
from ..models.schedule import Schedule
from .spec import ArgumentLimits, ScheduleSpec, stored_arguments


def declare(spec: ScheduleSpec, *, catch_up: str, next_tick: dt.datetime, now: dt.datetime) -> None:
    """Write a declared schedule's definition to its row (created if new).

    Pause and cursor are kept; ``next_tick`` is stored only when the cron or time
    zone changed. The arguments pass the input contract first, so a spec built
    without the checks is refused here with an error naming it, before any SQL.
    """
    args_json, kwargs_json = stored_arguments(spec, ArgumentLimits.of(get_settings()))
    db = get_settings().DATABASE
    with connections[db].cursor() as cursor:
        cursor.execute(
            sql.UPSERT_SCHEDULE,
            {
                "name": spec.name,
                "task_path": spec.task_path,
                "cron": spec.cron,
                "timezone": spec.timezone,
                "args": args_json,
                "kwargs": kwargs_json,
                "queue_name": spec.queue_name or "",
                "catch_up": catch_up,
                "origin": spec.origin,
                "next": next_tick,
                "now": now,
            },
        )


def read_state(name: str) -> tuple[bool, dt.datetime] | None:
    """(paused, cursor) of a schedule, or None when it has no row (deleted, or not
    declared yet). The cursor is the last tick enqueued or skipped, else the row's
    creation."""
    with connections[get_settings().DATABASE].cursor() as cursor:
        cursor.execute(sql.SCHEDULE_STATE, [name])
        row = cursor.fetchone()
    return None if row is None else (row[0], row[1])


def claim_tick(name: str, tick: dt.datetime) -> int | None:
    """Insert the tick's row; its id when this transaction won it, None when another
    worker's did (the unique (schedule, instant) constraint decides)."""
    with connections[get_settings().DATABASE].cursor() as cursor:
        cursor.execute(sql.INSERT_TICK, [name, tick])
        won = cursor.fetchone()
    return None if won is None else int(won[0])


def set_tick_job(tick_id: int, job_id: int | None) -> None:
    """Record the job a won tick enqueued (or the live unique job it is)."""
    with connections[get_settings().DATABASE].cursor() as cursor:
        cursor.execute(sql.SET_TICK_JOB, [job_id, tick_id])


def advance(
    name: str, *, tick: dt.datetime, job_id: int | None, next_tick: dt.datetime, now: dt.datetime
) -> None:
    """Move a schedule's cursor to ``tick`` (never back) and record its next tick and
    last job for the admin."""
    with connections[get_settings().DATABASE].cursor() as cursor:
        cursor.execute(
            sql.ADVANCE_SCHEDULE,
            {"name": name, "tick": tick, "job_id": job_id, "next": next_tick, "now": now},
        )


def set_paused(ids: Iterable[int], paused: bool) -> tuple[list[int], dict[int, str]]:
    """Pause or resume schedules; returns (changed ids, {skipped id: reason}).

    A paused schedule enqueues nothing: its ticks are skipped while it is paused
    and not caught up when it resumes (the scheduler moves its cursor past them).
    """
    wanted = list(ids)
    db = get_settings().DATABASE
    with transaction.atomic(using=db):
        rows = dict(
            Schedule.objects.using(db)
            .select_for_update()
            .filter(pk__in=wanted)
            .values_list("pk", "paused")
        )
        changed = [pk for pk in wanted if pk in rows and rows[pk] != paused]
        Schedule.objects.using(db).filter(pk__in=changed).update(paused=paused)
    state = "already paused" if paused else "not paused"
    skipped = {pk: state for pk in wanted if pk in rows and pk not in changed}
    skipped.update({pk: "deleted meanwhile" for pk in wanted if pk not in rows})
    return changed, skipped


def delete(ids: Iterable[int]) -> int:
    """Delete schedule rows (the admin's delete); returns how many went.

    A schedule still declared in a worker's code is declared again on that worker's
    next pass, its ticks counted from then. Its tick rows stay: they are the record of
    which instants already ran, so a re-declared schedule never enqueues one twice.
    """
    db = get_settings().DATABASE
    with transaction.atomic(using=db):
        deleted, _ = Schedule.objects.using(db).filter(pk__in=list(ids)).delete()
    return deleted
