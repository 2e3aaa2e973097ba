"""Flow control: per-key rate limits in the claim, ``PGQUEUE["QUEUES"]`` defaults and
how a run-time change wins over them, and the checks of bad settings.

The claims here are the worker's own statement on the worker's own connections;
tests/worker/test_flow_control_processes.py runs real worker processes.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from django_pgqueue import queues
from django_pgqueue.checks import check_settings
from django_pgqueue.db import connect
from django_pgqueue.jobs import store
from django_pgqueue.maintenance import prune
from django_pgqueue.models import Job, Queue, QueueKeyRate
from django_pgqueue.testing import run_queued_jobs
from testproject.demo import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def claim(limit: int = 20) -> list[Any]:
    params = {"all_queues": True, "queues": [], "limit": limit, "lease": 30.0, "worker_id": "t"}
    with connect("flow-test") as conn:
        return store.claim(conn, params)


def enqueue(n: int, queue: str, key: str | None = None) -> None:
    task = tasks.noop.using(queue_name=queue)
    if key is not None:
        task = task.using(concurrency_key=key)
    for _ in range(n):
        task.enqueue()


def keys_of(claimed: list[Any]) -> Counter[str | None]:
    by_id = dict(
        Job.objects.filter(pk__in=[j.id for j in claimed]).values_list("id", "concurrency_key")
    )
    return Counter(by_id[j.id] for j in claimed)


# ---- Per-key rate limits -----------------------------------------------------------


def test_each_key_has_its_own_rate_and_spends_no_attempt_over_it():
    queues.configure("metered", key_rate_limit=2, key_rate_period=60)
    enqueue(10, "metered", key="acme")
    enqueue(10, "metered", key="globex")
    enqueue(3, "metered")  # no key: only the queue's own limits apply
    assert keys_of(claim()) == {"acme": 2, "globex": 2, None: 3}
    assert claim() == []  # both buckets spent for a minute
    waiting = Job.objects.filter(queue_name="metered", status="pending")
    assert waiting.count() == 16 and set(waiting.values_list("attempts", flat=True)) == {0}
    assert set(QueueKeyRate.objects.values_list("key", flat=True)) == {"acme", "globex"}
    enqueue(1, "metered", key="initech")  # a new key starts with a full bucket
    assert keys_of(claim()) == {"initech": 1}


def test_the_key_rate_refills_and_the_queue_rate_still_caps_the_total():
    queues.configure("metered", rate_limit=3, rate_period=60, key_rate_limit=2, key_rate_period=60)
    enqueue(5, "metered", key="acme")
    enqueue(5, "metered", key="globex")
    first = keys_of(claim())
    assert sum(first.values()) == 3 and max(first.values()) == 2
    # A minute later (the state moved back): each key may start two again, the
    # queue three in all.
    past = timezone.now() - dt.timedelta(seconds=1)
    QueueKeyRate.objects.update(rate_tat=past)
    Queue.objects.filter(name="metered").update(rate_tat=past)
    again = keys_of(claim())
    assert sum(again.values()) == 3 and max(again.values()) == 2


def test_clearing_the_key_rate_drops_its_state_and_prune_drops_full_buckets():
    queues.configure("metered", key_rate_limit=1, key_rate_period=60)
    enqueue(2, "metered", key="acme")
    enqueue(2, "metered", key="globex")
    assert len(claim()) == 2
    assert QueueKeyRate.objects.count() == 2
    QueueKeyRate.objects.filter(key="acme").update(rate_tat=timezone.now() - dt.timedelta(1))
    report = prune(dry_run=True)
    assert report.deleted["pgqueue_queue_key_rate"] == {"full": 1}
    prune()
    assert list(QueueKeyRate.objects.values_list("key", flat=True)) == ["globex"]
    queues.configure("metered")  # no key rate limit any more
    assert not QueueKeyRate.objects.exists()
    assert len(claim()) == 2


def test_bad_key_rate_limits_are_refused_and_nothing_is_written():
    for options, message in (
        ({"key_rate_limit": 0}, "key_rate_limit must be between 1"),
        ({"key_rate_limit": 3, "key_rate_period": 0}, r"key_rate_period \(seconds\) must be"),
        ({"key_rate_limit": "ten"}, "key_rate_limit must be a whole number"),
    ):
        with pytest.raises(ValueError, match=message):
            queues.configure("metered", **options)
    assert not Queue.objects.exists()


def test_the_command_sets_a_key_rate_and_shows_the_source(capsys):
    call_command("pgqueue_queue", "configure", "metered", "--create", "--key-rate-limit", "4")
    row = queues.get("metered")
    assert (row.key_rate_limit, row.key_rate_period, row.source) == (4, 1, "run time")
    call_command("pgqueue_queue", "list")
    out = capsys.readouterr().out
    assert "key_rate=4/1s" in out and "limits set at run time" in out


# ---- Settings-level defaults ------------------------------------------------------

REPORTS = {"reports": {"concurrency": 3, "key_concurrency": 2, "rate_limit": 10}}


def test_settings_seed_the_row_and_a_restart_rewrites_nothing():
    with override_settings(PGQUEUE={"QUEUES": REPORTS}):
        assert queues.apply_settings() == (1, 0)
        row = queues.get("reports")
        assert (row.concurrency, row.key_concurrency, row.rate_limit, row.rate_period) == (
            3,
            2,
            10,
            1,
        )
        assert row.source == "settings" and row.overridden_at is None
        assert queues.apply_settings() == (0, 0)


def test_a_run_time_change_wins_over_the_settings_until_reset():
    with override_settings(PGQUEUE={"QUEUES": REPORTS}):
        queues.apply_settings()
        queues.configure("reports", concurrency=5)
        assert queues.get("reports").source == "run time"
    changed = {"reports": {**REPORTS["reports"], "concurrency": 4}}
    with override_settings(PGQUEUE={"QUEUES": changed}):
        assert queues.apply_settings() == (0, 0)  # the operator's 5 stays
        row = queues.get("reports")
        assert (row.concurrency, row.key_concurrency, row.rate_limit) == (5, None, None)
        assert queues.reset("reports") is True
        row = queues.get("reports")
        assert (row.concurrency, row.key_concurrency, row.source) == (4, 2, "settings")
        assert queues.reset("nothing-here") is False


def test_a_queue_the_settings_drop_loses_their_limits_but_keeps_a_pause():
    both = {**REPORTS, "exports": {"concurrency": 1}}
    with override_settings(PGQUEUE={"QUEUES": both}):
        queues.apply_settings()
    queues.pause("exports")
    queues.configure("manual", concurrency=7)  # an operator's queue is never touched
    with override_settings(PGQUEUE={"QUEUES": {}}):
        assert queues.apply_settings() == (0, 1)
        assert queues.get("reports") is None  # no row: no limits
        exports = queues.get("exports")
        assert exports.paused and exports.concurrency is None
        assert queues.get("manual").concurrency == 7


def test_the_testing_helper_applies_the_settings():
    enqueue(4, "reports", key="acme")
    settings = {"QUEUES": {"reports": {"key_rate_limit": 1, "key_rate_period": 60}}}
    with override_settings(PGQUEUE=settings):
        report = run_queued_jobs()
    assert report.outcomes[("jobs", "succeeded")] == 1  # the key's bucket held one
    assert Job.objects.filter(status="pending").count() == 3


@pytest.mark.parametrize(
    ("queues_setting", "message"),
    [
        ({"reports": {"concurrency": 0}}, "PGQUEUE['QUEUES']['reports']: concurrency must be"),
        (
            {"reports": {"rate_limit": 5, "rate_period": 0}},
            "PGQUEUE['QUEUES']['reports']: rate_period (seconds) must be between 1",
        ),
        ({"reports": {"concurency": 3}}, "concurency (did you mean 'concurrency'?)"),
        ({"reports": 3}, "PGQUEUE['QUEUES']['reports'] must be a dict of limits, got 3"),
        ({"": {"concurrency": 3}}, "PGQUEUE['QUEUES']: A queue name must be a non-empty"),
        ({"x" * 101: {}}, "more than the 100 allowed"),
        ([("reports", {})], "PGQUEUE['QUEUES'] must be a dict of queue name to its limits"),
    ],
)
def test_bad_queue_settings_are_a_system_check_error_naming_the_entry(queues_setting, message):
    with override_settings(PGQUEUE={"QUEUES": queues_setting}):
        errors = check_settings()
    assert [e.id for e in errors] == ["django_pgqueue.E001"]
    assert message in errors[0].msg


def test_the_admin_shows_where_the_limits_come_from(client):
    from django.contrib.auth.models import User

    client.force_login(User.objects.create_superuser("root"))
    queues.configure("manual", key_rate_limit=4, key_rate_period=2)
    with override_settings(PGQUEUE={"QUEUES": REPORTS}):
        queues.apply_settings()
        page = client.get("/admin/django_pgqueue/queue/").content.decode()
    assert "run time (overrides settings)" in page and "4 / 2 s" in page
    assert '<td class="field-source">settings</td>' in page
