"""State changes of schedules that operators make (the admin calls these)."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from ..conf import get_settings
from ..models.schedule import Schedule


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


def run_now(schedule_id: int) -> tuple[str, int | None]:
    """Enqueue one run of a schedule's task now, outside its cron; (name, job id).

    The run is the schedule's own call (task, arguments, queue) enqueued the way a
    tick enqueues it (``Scheduler._enqueue``: a unique task whose run is still live
    answers with that run's job), but it is not a tick: the cursor, the next run
    and the tick log stay as they are, so the cron's own runs are neither skipped
    nor doubled. Raises ``Schedule.DoesNotExist`` for an unknown id.
    """
    from .scheduler import Scheduler
    from .spec import ScheduleSpec

    db = get_settings().DATABASE
    with transaction.atomic(using=db):
        row = Schedule.objects.using(db).get(pk=schedule_id)
        spec = ScheduleSpec(
            name=row.name,
            task_path=row.task_path,
            cron=row.cron,
            timezone=row.timezone,
            args=list(row.args or []),
            kwargs=dict(row.kwargs or {}),
            queue_name=row.queue_name or None,
        )
        return row.name, Scheduler({})._enqueue(spec)
