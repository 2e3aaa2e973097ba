"""Cron ticks as instants, across daylight-saving changes (no database)."""

from __future__ import annotations

import datetime as dt

import pytest

from django_pgqueue.periodic import cron

UTC = dt.UTC


def at(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


def test_spring_forward_a_missing_wall_time_runs_once_after_the_gap():
    # Paris, 2026-03-29: 02:00 local jumps to 03:00. "02:30" does not exist that day.
    ticks, more = cron.due_ticks("30 2 * * *", "Europe/Paris", at(2026, 3, 27), at(2026, 3, 31), 10)
    assert not more
    assert ticks == [
        at(2026, 3, 27, 1, 30),  # 02:30 CET
        at(2026, 3, 28, 1, 30),
        at(2026, 3, 29, 1, 0),  # the gap: 03:00 CEST, once
        at(2026, 3, 30, 0, 30),  # 02:30 CEST
    ]


def test_fall_back_a_repeated_wall_time_runs_once():
    # Paris, 2026-10-25: 03:00 local goes back to 02:00. "02:30" happens twice.
    ticks, _ = cron.due_ticks("30 2 * * *", "Europe/Paris", at(2026, 10, 24), at(2026, 10, 27), 10)
    assert ticks == [at(2026, 10, 24, 0, 30), at(2026, 10, 25, 0, 30), at(2026, 10, 26, 1, 30)]


def test_sub_hourly_jobs_follow_real_time_across_both_changes():
    ticks, _ = cron.due_ticks(
        "*/30 * * * *", "Europe/Paris", at(2026, 10, 24, 23, 59), at(2026, 10, 25, 2, 1), 20
    )
    # Every 30 minutes of real time, both 02:xx hours included.
    assert ticks == [at(2026, 10, 25, 0, 0) + dt.timedelta(minutes=30 * i) for i in range(5)]
    spring, _ = cron.due_ticks(
        "*/30 * * * *", "Europe/Paris", at(2026, 3, 28, 23, 59), at(2026, 3, 29, 2, 1), 20
    )
    assert spring == [at(2026, 3, 29, 0, 0) + dt.timedelta(minutes=30 * i) for i in range(5)]


def test_latest_tick_agrees_with_forward_iteration_around_dst():
    for start, end in [
        (at(2026, 3, 27), at(2026, 3, 31)),
        (at(2026, 10, 23), at(2026, 10, 27)),
    ]:
        hour = start
        while hour < end:
            forward, _ = cron.due_ticks("30 2 * * *", "Europe/Paris", start, hour, 100)
            latest = cron.latest_tick("30 2 * * *", "Europe/Paris", start, hour)
            assert latest == (forward[-1] if forward else None), hour
            hour += dt.timedelta(minutes=30)


def test_latest_tick_after_a_long_downtime_is_one_step():
    latest = cron.latest_tick("* * * * *", "UTC", at(2020, 1, 1), at(2026, 1, 1, 12, 34, 56))
    assert latest == at(2026, 1, 1, 12, 34)
    assert cron.latest_tick("0 3 * * *", "UTC", at(2026, 1, 1, 3), at(2026, 1, 2, 2)) is None


def test_due_ticks_is_bounded():
    ticks, more = cron.due_ticks("* * * * *", "UTC", at(2026, 1, 1), at(2026, 1, 2), 5)
    assert len(ticks) == 5 and more


@pytest.mark.parametrize(
    ("expression", "zone", "message"),
    [
        ("61 * * * *", "UTC", "bad cron expression '61 \\* \\* \\* \\*': Bad minute"),
        ("* * *", "UTC", "bad cron expression"),
        ("", "UTC", "non-empty string"),
        ("* * * * *", "Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
    ],
)
def test_bad_input_names_the_problem(expression, zone, message):
    with pytest.raises(cron.BadCron, match=message):
        cron.validate(expression, zone)
