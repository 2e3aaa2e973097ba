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
