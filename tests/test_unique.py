"""Unique tasks: at most one live job per (task, key), settled by the unique index."""

from __future__ import annotations

import threading

import pytest
from django.db import connections, transaction

from django_pgqueue.compat import TaskResultStatus, task
from django_pgqueue.exceptions import DuplicateJob, InvalidUniqueKey
from django_pgqueue.models import Job
from testproject.demo import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def test_second_enqueue_returns_the_live_job():
    first = tasks.unique_add.enqueue(1, 2)
    second = tasks.unique_add.enqueue(1, 2)
    assert second.id == first.id
    assert second.status == TaskResultStatus.READY
    assert Job.objects.filter(task_path="testproject.demo.tasks.unique_add").count() == 1
    other = tasks.unique_add.enqueue(2, 2)  # other arguments: another key
    assert other.id != first.id
    # Keyword order does not make a different call.
    a = tasks.unique_add.enqueue(a=5, b=6)
    assert tasks.unique_add.enqueue(b=6, a=5).id == a.id


@pytest.mark.parametrize("state", ["pending", "in_progress", "failed"])
def test_every_live_state_holds_the_key(state):
    first = tasks.unique_add.enqueue(1, 1)
    Job.objects.filter(pk=int(first.id)).update(
        status=state,
        locked_by="00000000-0000-0000-0000-000000000001" if state == "in_progress" else None,
        locked_until="2999-01-01T00:00:00Z" if state == "in_progress" else None,
    )
    assert tasks.unique_add.enqueue(1, 1).id == first.id


@pytest.mark.parametrize("state", ["succeeded", "dead", "cancelled"])
def test_a_finished_job_frees_the_key(state):
    first = tasks.unique_add.enqueue(3, 3)
    Job.objects.filter(pk=int(first.id)).update(status=state, finished_at="2026-01-01T00:00:00Z")
    again = tasks.unique_add.enqueue(3, 3)
    assert again.id != first.id


def test_per_call_key_and_raise_option():
    first = tasks.keyed_refund.using(unique_key="order-42").enqueue(42)
    with pytest.raises(DuplicateJob) as caught:
        tasks.keyed_refund.using(unique_key="order-42").enqueue(43)
    assert caught.value.job_id == int(first.id)
    assert "order-42" in str(caught.value)
    # Without a key the task is not unique.
    tasks.keyed_refund.enqueue(42)
    tasks.keyed_refund.enqueue(42)
    assert Job.objects.filter(task_path="testproject.demo.tasks.keyed_refund").count() == 3


def test_per_call_key_on_a_plain_task_and_in_enqueue_many():
    from django_pgqueue import enqueue_many

    keyed = tasks.add.using(unique_key="nightly")
    first = keyed.enqueue(1, 2)
    assert keyed.enqueue(9, 9).id == first.id
    results = enqueue_many(tasks.unique_add, [((7, 7), {}), ((7, 7), {}), ((8, 8), {})])
    assert results[0].id == results[1].id != results[2].id


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("x" * 256, "256 characters long, more than the 255"),
        ("", "non-empty string"),
        ("order\x00-42", r"NUL character \(\\x00\) at position 5"),
        ("order-\ud800", r"lone surrogate \('\\ud800'\) at position 6"),
    ],
)
def test_bad_unique_key_is_refused_before_writing(key, message):
    with pytest.raises(InvalidUniqueKey, match=message):
        tasks.add.using(unique_key=key).enqueue(1, 2)
    assert not Job.objects.exists()


def _enqueue_in_thread(key, hold: threading.Event, entered: threading.Event, out, rollback=False):
    try:
        with transaction.atomic():
            out.append(tasks.keyed_refund.using(unique_key=key).enqueue(1).id)
            entered.set()
            hold.wait(10)
            if rollback:
                raise RuntimeError("roll back")
    except RuntimeError:
        pass
    finally:
        connections.close_all()


def _backend_waiting(pid_of_others: int) -> bool:
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE '%%pgqueue:enqueue_keyed%%'"
        )
        return cursor.fetchone()[0] >= pid_of_others


@pytest.mark.parametrize("first_commits", [True, False])
def test_concurrent_enqueues_are_settled_by_the_index(first_commits):
    """Two real transactions enqueue one key at once: the second waits on the index.

    If the first commits, the second gets the first's job; if it rolls back, the
    second's own row is written. No read-then-write is involved: the second
    INSERT is provably blocked on the first's uncommitted row while it waits.
    """
    hold, entered = threading.Event(), threading.Event()
    first: list[str] = []
    t1 = threading.Thread(
        target=_enqueue_in_thread, args=("race", hold, entered, first, not first_commits)
    )
    t1.start()
    assert entered.wait(10)
    second: list[str] = []
    errors: list[BaseException] = []

    def enqueue_second():
        try:
            with transaction.atomic():
                second.append(tasks.add.using(unique_key="x").enqueue(0, 0).id)  # other task
                second.append(str(tasks.keyed_refund.using(unique_key="race").enqueue(2).id))
        except DuplicateJob as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    t2 = threading.Thread(target=enqueue_second)
    t2.start()
    deadline = threading.Event()
    for _ in range(500):
        if _backend_waiting(1):
            break
        deadline.wait(0.02)
    else:
        raise AssertionError("the second enqueue never waited on the unique index")
    hold.set()
    t1.join(10)
    t2.join(10)
    live = Job.objects.filter(task_path="testproject.demo.tasks.keyed_refund", unique_key="race")
    assert live.count() == 1
    if first_commits:
        # keyed_refund raises on a duplicate: the index, not a read, found it.
        assert len(errors) == 1 and errors[0].job_id == int(first[0])
    else:
        assert not errors
        assert str(live.get().pk) == second[1]


def test_replaying_a_finished_job_whose_key_is_live_again_is_skipped():
    from django_pgqueue import operations

    first = tasks.unique_add.enqueue(4, 4)
    Job.objects.filter(pk=int(first.id)).update(status="dead", finished_at="2026-01-01T00:00Z")
    live = tasks.unique_add.enqueue(4, 4)  # the key is free: a new live job
    other = tasks.add.enqueue(1, 1)
    Job.objects.filter(pk=int(other.id)).update(status="dead", finished_at="2026-01-01T00:00Z")
    result = operations.replay(Job, [int(first.id), int(other.id)])
    assert result.changed == {int(other.id): "dead"}
    assert result.skipped == {int(first.id): "its unique key is held by another live job"}
    assert Job.objects.get(pk=int(first.id)).status == "dead"
    assert Job.objects.get(pk=int(live.id)).status == "pending"


@task(unique=True)
def sync_shop(shop_id: int, full: bool = False, *, region: str = "eu") -> int:
    """A unique task with defaults: every spelling of one call is one key."""
    return shop_id


def test_one_call_spelled_positionally_or_by_keyword_is_one_key():
    first = sync_shop.enqueue(7)
    for same in (
        lambda: sync_shop.enqueue(shop_id=7),
        lambda: sync_shop.enqueue(7, False),
        lambda: sync_shop.enqueue(7, full=False, region="eu"),
        lambda: sync_shop.enqueue(region="eu", shop_id=7),
    ):
        assert same().id == first.id
    assert sync_shop.enqueue(7, True).id != first.id
    assert sync_shop.enqueue(7, region="us").id != first.id
    assert Job.objects.filter(task_path=sync_shop.module_path).count() == 3


def test_arguments_that_do_not_fit_the_signature_are_refused_before_writing():
    with pytest.raises(InvalidUniqueKey, match=r"sync_shop.*do not match its signature"):
        sync_shop.enqueue(7, colour="red")
    assert not Job.objects.exists()


@task(unique=True, takes_context=True)
def sync_shop_with_context(context, shop_id: int, full: bool = False) -> int:
    """The context is the worker's to pass, not part of the call's key."""
    return shop_id


def test_a_task_taking_context_binds_the_callers_arguments_only():
    first = sync_shop_with_context.enqueue(7)
    assert sync_shop_with_context.enqueue(shop_id=7, full=False).id == first.id
