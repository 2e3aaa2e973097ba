"""The scheduler with an injected clock: ticks, catch-up policies, pause, removal, DST."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import override_settings

from django_pgqueue.models import Job, Schedule, ScheduleTick
from django_pgqueue.periodic.scheduler import Scheduler
from django_pgqueue.periodic.spec import ScheduleSpec

pytestmark = pytest.mark.django_db(transaction=True)

UTC = dt.UTC
ADD = "testproject.demo.tasks.add"


class Clock:
    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += dt.timedelta(**delta)


def spec(name: str = "every-minute", cron: str = "* * * * *", **kw) -> ScheduleSpec:
    return ScheduleSpec(name=name, task_path=kw.pop("task_path", ADD), cron=cron, args=[1, 2], **kw)


def scheduler(clock: Clock, *specs: ScheduleSpec) -> Scheduler:
    s = Scheduler({sp.name: sp for sp in specs}, clock=clock)
    s.sync()
    return s


def jobs() -> list[Job]:
    return list(Job.objects.filter(task_path=ADD).order_by("id"))


def test_exactly_one_job_per_tick_from_many_schedulers():
    clock = Clock(dt.datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC))
    fleet = [scheduler(clock, spec()) for _ in range(3)]
    for _ in range(40):
        clock.advance(minutes=1)
        for s in fleet:
            s.run_pass()
    assert len(jobs()) == 40
    ticks = list(ScheduleTick.objects.order_by("tick_at").values_list("tick_at", "job_id"))
    assert [t for t, _ in ticks] == [
        dt.datetime(2026, 1, 1, 12, 1, tzinfo=UTC) + dt.timedelta(minutes=i) for i in range(40)
    ]
    assert sorted(j for _, j in ticks) == [j.id for j in jobs()]
    assert sum(s.enqueued for s in fleet) == 40
    row = Schedule.objects.get(name="every-minute")
    assert row.last_tick_at == dt.datetime(2026, 1, 1, 12, 40, tzinfo=UTC)
    assert row.next_tick_at == dt.datetime(2026, 1, 1, 12, 41, tzinfo=UTC)
    assert row.last_job_id == jobs()[-1].id


def test_a_new_schedule_does_not_run_ticks_from_before_it_existed():
    clock = Clock(dt.datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC))
    s = scheduler(clock, spec())
    s.run_pass()
    assert jobs() == []
    clock.advance(seconds=30)
    s.run_pass()
    assert len(jobs()) == 1
    assert jobs()[0].args == [1, 2]


@pytest.mark.parametrize(("policy", "expected"), [("latest", 1), ("all", 10), ("none", 0)])
def test_catch_up_after_downtime(policy, expected):
    clock = Clock(dt.datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC))
    s = scheduler(clock, spec(cron="0 * * * *", catch_up=policy))
    clock.advance(hours=10, minutes=30)  # no worker ran for ten hourly ticks
    s.run_pass()
    assert len(jobs()) == expected
    if policy == "latest":
        assert ScheduleTick.objects.get().tick_at == dt.datetime(2026, 1, 1, 22, 0, tzinfo=UTC)
    # Afterwards every policy runs each tick on time, once.
    clock.advance(minutes=30)
    s.run_pass()
    s.run_pass()
    assert len(jobs()) == expected + 1


def test_none_policy_still_runs_a_tick_that_is_only_a_little_late():
    clock = Clock(dt.datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC))
    s = scheduler(clock, spec(catch_up="none"))
    clock.advance(seconds=45)  # 12:01:15, 15 s late (grace: 60 s)
    s.run_pass()
    assert len(jobs()) == 1


def test_pause_skips_ticks_and_resume_does_not_replay_them():
    clock = Clock(dt.datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC))
    s = scheduler(clock, spec())
    Schedule.objects.filter(name="every-minute").update(paused=True)
    for _ in range(5):
        clock.advance(minutes=1)
        s.run_pass()
    assert jobs() == []
    Schedule.objects.filter(name="every-minute").update(paused=False)
    s.run_pass()
    assert jobs() == []  # the paused ticks are not caught up
    clock.advance(minutes=1)
    s.run_pass()
    assert len(jobs()) == 1


def test_a_schedule_removed_from_settings_stops():
    clock = Clock(dt.datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC))
    entry = {"task": ADD, "cron": "* * * * *", "args": [1, 2]}
    with override_settings(PGQUEUE={"SCHEDULE": {"kept": entry, "removed": entry}}):
        s = Scheduler(clock=clock)
        s.sync()
        clock.advance(minutes=1)
        s.run_pass()
    assert sorted(ScheduleTick.objects.values_list("schedule_name", flat=True)) == [
        "kept",
        "removed",
    ]
    with override_settings(PGQUEUE={"SCHEDULE": {"kept": entry}}):
        s = Scheduler(clock=clock)  # a worker started after the deploy
        s.sync()
        for _ in range(3):
            clock.advance(minutes=1)
            s.run_pass()
    names = list(ScheduleTick.objects.values_list("schedule_name", flat=True))
    assert names.count("kept") == 4 and names.count("removed") == 1


def test_dst_fall_back_runs_a_daily_tick_once_and_spring_forward_runs_the_gap():
    clock = Clock(dt.datetime(2026, 10, 24, 12, 0, tzinfo=UTC))
    s = scheduler(clock, spec(name="nightly", cron="30 2 * * *", timezone="Europe/Paris"))
    for _ in range(4 * 48):  # two days in 15-minute steps across the change
        clock.advance(minutes=15)
        s.run_pass()
    ticks = list(ScheduleTick.objects.order_by("tick_at").values_list("tick_at", flat=True))
    # 02:30 CEST once on the 25th (not again at 02:30 CET), then 02:30 CET.
    assert ticks == [
        dt.datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
        dt.datetime(2026, 10, 26, 1, 30, tzinfo=UTC),
    ]

    clock.now = dt.datetime(2026, 3, 28, 12, 0, tzinfo=UTC)
    ScheduleTick.objects.all().delete()
    Schedule.objects.all().delete()
    s = scheduler(clock, spec(name="nightly", cron="30 2 * * *", timezone="Europe/Paris"))
    for _ in range(4 * 48):
        clock.advance(minutes=15)
        s.run_pass()
    ticks = list(ScheduleTick.objects.order_by("tick_at").values_list("tick_at", flat=True))
    # 02:30 does not exist on the 29th: it runs at 03:00 CEST; then 02:30 CEST.
    assert ticks == [
        dt.datetime(2026, 3, 29, 1, 0, tzinfo=UTC),
        dt.datetime(2026, 3, 30, 0, 30, tzinfo=UTC),
    ]


def test_a_unique_task_still_running_is_the_ticks_job():
    clock = Clock(dt.datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC))
    unique = ScheduleSpec(
        name="u", task_path="testproject.demo.tasks.unique_add", cron="* * * * *", args=[1, 2]
    )
    s = scheduler(clock, unique)
    for _ in range(3):
        clock.advance(minutes=1)
        s.run_pass()
    assert Job.objects.filter(task_path="testproject.demo.tasks.unique_add").count() == 1
    assert ScheduleTick.objects.count() == 3
    assert len(set(ScheduleTick.objects.values_list("job_id", flat=True))) == 1


def test_queue_name_and_the_decorator():
    from django_pgqueue.periodic import periodic
    from django_pgqueue.periodic.registry import _declared
    from testproject.demo import tasks

    try:
        assert periodic(cron="*/5 * * * *", name="deco", queue_name="reports")(tasks.add) is (
            tasks.add
        )
        declared = _declared["deco"]
        assert (declared.cron, declared.origin, declared.queue_name) == (
            "*/5 * * * *",
            "decorator",
            "reports",
        )
        clock = Clock(dt.datetime(2026, 1, 1, 12, 1, tzinfo=UTC))
        s = scheduler(clock, declared)
        clock.advance(minutes=4)
        s.run_pass()
        assert [j.queue_name for j in jobs()] == ["reports"]
    finally:
        _declared.pop("deco", None)


@pytest.mark.parametrize(
    "bad",
    [
        ScheduleSpec(name="nul-args", task_path=ADD, cron="* * * * *", args=["a\x00b"]),
        ScheduleSpec(
            name="nan-kwargs", task_path=ADD, cron="* * * * *", kwargs={"x": float("nan")}
        ),
        ScheduleSpec(name="nul\x00name", task_path=ADD, cron="* * * * *"),
        ScheduleSpec(name="gone-task", task_path="testproject.demo.tasks.nope", cron="* * * * *"),
    ],
    ids=["nul-args", "nan-kwargs", "nul-name", "unknown-task"],
)
def test_one_bad_schedule_never_stops_the_others(bad, caplog):
    # Specs built directly skip the checks, as a schedule row edited or declared by
    # another code version might: the scheduler must still run every other schedule.
    clock = Clock(dt.datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC))
    s = Scheduler({bad.name: bad, "good": spec(name="good")}, clock=clock)
    with caplog.at_level("ERROR", logger="django_pgqueue.scheduler"):
        s.sync()
        for _ in range(3):
            clock.advance(minutes=1)
            s.run_pass()
    good = jobs()
    assert len(good) == 3  # zero lost ticks of the good schedule
    assert list(ScheduleTick.objects.values_list("schedule_name", flat=True)) == ["good"] * 3
    assert Schedule.objects.get(name="good").last_job_id == good[-1].id
    logged = [r.getMessage() for r in caplog.records]
    assert any(repr(bad.name) in line for line in logged), logged


def test_a_schedule_failing_the_same_way_is_logged_once_not_every_pass(caplog):
    clock = Clock(dt.datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC))
    broken = ScheduleSpec(name="broken", task_path="testproject.demo.tasks.nope", cron="* * * * *")
    s = scheduler(clock, broken, spec(name="good"))
    with caplog.at_level("ERROR", logger="django_pgqueue.scheduler"):
        for _ in range(5):
            clock.advance(minutes=1)
            s.run_pass()
    failures = [r for r in caplog.records if "'broken'" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is not None
    assert len(jobs()) == 5  # the good schedule lost no tick
