"""Cron expressions and their ticks, as instants (aware UTC datetimes).

Parsing and iteration are cronsim's (https://pypi.org/project/cronsim/). It was
chosen over croniter because it has no dependencies, ships type hints, and
matches Debian cron's documented behaviour across daylight-saving changes, which
is what users of cron expect; croniter went unmaintained in 2024 before being
adopted by a new organisation, depends on python-dateutil and has its own DST
rules. Both accept the usual 5 fields (plus seconds as a 6th, and ``L``/``#``).

Ticks are computed in the schedule's time zone and stored as instants, so a
tick is one point in time however the wall clock moved. Across a DST change
(Debian cron's rules, docs/periodic.md):

* a wall-clock time that does not exist (spring forward, e.g. 02:30 in Paris on
  the last Sunday of March) runs once, at the first instant after the gap
  (03:00), for a job at a fixed hour; sub-hourly jobs simply have no ticks in
  the gap;
* a wall-clock time that happens twice (fall back) runs once, at its first
  occurrence, for a job at a fixed hour; sub-hourly jobs run in both hours,
  since their instants differ.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

UTC = dt.UTC


#: The longest cron expression accepted: what the schedule row's ``cron`` column
#: holds. The cap also keeps a pasted blob a clear error (a field of 5,000 digits
#: overflows Python's int-from-text limit inside cronsim).
MAX_EXPRESSION_LENGTH = 200
#: The longest time zone name accepted: the row's ``timezone`` column. IANA names
#: are at most 32 characters; a longer one would only be a long path into zoneinfo.
MAX_ZONE_LENGTH = 64


class BadCron(ValueError):
    """A cron expression or time zone that cannot be used."""


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``, or BadCron naming it."""
    if isinstance(name, str) and len(name) > MAX_ZONE_LENGTH:
        raise BadCron(
            f"a time zone name is at most {MAX_ZONE_LENGTH} characters, got one of "
            f"{len(name)} ({name[:40]!r}...); use an IANA name such as 'Europe/Paris'"
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError) as exc:
        raise BadCron(
            f"unknown time zone {name!r} (use an IANA name such as 'Europe/Paris')"
        ) from exc


def validate(expression: str, timezone: str = "UTC") -> None:
    """Raise BadCron with cronsim's reason unless ``expression`` parses."""
    if not isinstance(expression, str) or not expression.strip():
        raise BadCron(f"a cron expression must be a non-empty string, got {expression!r}")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise BadCron(
            f"a cron expression is at most {MAX_EXPRESSION_LENGTH} characters, got one of "
            f"{len(expression)} ({expression[:40]!r}...)"
        )
    tz = zone(timezone)
    try:
        CronSim(expression, dt.datetime(2000, 1, 1, tzinfo=tz))
    except (CronSimError, ValueError, OverflowError) as exc:
        # cronsim range-checks each number it reads, but the int() it reads with can
        # fail first (a number of more digits than Python converts): same error.
        raise BadCron(f"bad cron expression {expression!r}: {exc}") from exc


def ticks_after(expression: str, timezone: str, after: dt.datetime) -> Iterator[dt.datetime]:
    """Ticks strictly after the instant ``after``, in order, as UTC datetimes."""
    local = after.astimezone(zone(timezone))
    for tick in CronSim(expression, local):
        yield tick.astimezone(UTC)


def due_ticks(
    expression: str, timezone: str, after: dt.datetime, until: dt.datetime, limit: int
) -> tuple[list[dt.datetime], bool]:
    """Ticks in ``(after, until]``: the oldest ``limit`` of them, and whether more were due."""
    found: list[dt.datetime] = []
    for tick in ticks_after(expression, timezone, after):
        if tick > until:
            return found, False
        if len(found) == limit:
            return found, True
        found.append(tick)
    return found, False  # pragma: no cover - cron ticks never end


def latest_tick(
    expression: str, timezone: str, after: dt.datetime, until: dt.datetime
) -> dt.datetime | None:
    """The last tick in ``(after, until]``, or None.

    Walks backwards from ``until`` (cronsim's reverse mode), so a long downtime
    costs one step, not one per missed tick.
    """
    tz = zone(timezone)
    # Reverse iteration yields ticks strictly before its start: start just after.
    start = (until + dt.timedelta(microseconds=1)).astimezone(tz)
    candidate = next(CronSim(expression, start, reverse=True)).astimezone(UTC)
    # The tick's identity is the instant forward iteration gives (what "all"
    # enqueues). Around a DST change reverse mode can land on an earlier tick or
    # an instant forward iteration never yields, so the answer is always settled
    # by walking forward, from just before the candidate: a step or two.
    walk_from = max(after, candidate - dt.timedelta(microseconds=1))
    latest = None
    for tick in ticks_after(expression, timezone, walk_from):
        if tick > until:
            break
        latest = tick
    if latest is None and walk_from > after:
        # The candidate was not a forward tick and none followed: look from ``after``.
        for tick in ticks_after(expression, timezone, after):
            if tick > until:
                break
            latest = tick
    return latest


def next_tick(expression: str, timezone: str, after: dt.datetime) -> dt.datetime:
    """The first tick strictly after ``after``."""
    return next(ticks_after(expression, timezone, after))
