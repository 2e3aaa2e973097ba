"""Outcome writes never fail because of content (catalogue S2, outcome side).

What a worker records comes partly from outside: a receiver's headers and body, an
exception's message, a task's return value. It is made storable before it reaches
SQL (NUL and lone surrogates escaped visibly), and a coalesced completion that is
still refused for a value is written again row by row, so one bad row never sends
innocent work round again.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from ..support.receiver import Receiver
from ..webhooks.conftest import FAST_WEBHOOKS

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120), pytest.mark.django_db(transaction=True)]

#: Short leases: if an outcome is not written, its row comes back within seconds.
LEASE = 2.0


@pytest.fixture
def fast_leases(settings):
    settings.PGQUEUE = {
        **settings.PGQUEUE,
        "LEASE_SECONDS": LEASE,
        "POLL_INTERVAL": 0.1,
        "COMPLETION_RETRY_SECONDS": 1.0,
        "WEBHOOKS": {**FAST_WEBHOOKS, "RETRY_SCHEDULE": [0, 0, 0, 0, 0]},
    }


def nul_in_a_header(handler, request) -> None:
    """A raw response: a NUL byte in a header value and in the body."""
    handler.wfile.write(
        b"HTTP/1.1 200 OK\r\n"
        b"Content-Type: text/plain\r\n"
        b"X-Evil: a\x00b\r\n"
        b"Content-Length: 3\r\n"
        b"\r\n"
        b"o\x00k"
    )


def test_nul_in_a_response_header_fails_no_other_delivery(fast_leases, run_worker, summary):
    """A NUL byte in one receiver's header, 30 innocent endpoints in the same batches:
    every endpoint gets exactly one POST, and the hostile delivery's outcome is stored
    with the header escaped."""
    from django_pgqueue import send_event
    from django_pgqueue.models import Delivery, DeliveryAttempt, Endpoint

    with Receiver() as receiver:
        receiver.routes["/hostile"] = nul_in_a_header
        paths = [f"/innocent/{n}" for n in range(30)] + ["/hostile"]
        for path in paths:
            endpoint = Endpoint(url=receiver.url(path))
            endpoint.full_clean()
            endpoint.save()
        event = send_event("order.paid", {"order_id": 1})
        run_worker(concurrency=8, timeout=90)
        posts = Counter(request.path for request in receiver.requests)

    assert posts == Counter(paths), posts
    statuses = Counter(Delivery.objects.filter(event=event).values_list("status", flat=True))
    assert statuses == {"succeeded": 31}, statuses
    hostile = DeliveryAttempt.objects.get(delivery__endpoint__url__endswith="/hostile")
    assert hostile.status_code == 200 and hostile.error == ""
    assert hostile.response_headers["X-Evil"] == "a\\x00b"
    assert hostile.response_body == "o\\x00k"
    duplicates = sum(posts.values()) - len(paths)
    summary(
        faults=1,
        tasks=len(paths),
        duplicates=duplicates,
        lost=31 - statuses["succeeded"],
        note="NUL in a response header and body; 30 innocent endpoints",
    )


def test_an_endpoint_row_python_cannot_decode_fails_only_its_own_deliveries(
    fast_leases, run_worker, summary
):
    """An endpoint whose stored headers (written past the admin and the API) nest
    beyond Python's recursion limit, 10 innocent endpoints in the same claims: every
    innocent endpoint gets exactly one POST, and the hostile delivery is never sent,
    its attempt naming the problem (before, decoding the whole claim's result raised:
    every delivery of the batch sat leased until its lease lapsed, then came back)."""
    from django.db import connection

    from django_pgqueue import send_event
    from django_pgqueue.models import Delivery, DeliveryAttempt, Endpoint

    from .test_bad_input import UNDECODABLE_ARGS

    with Receiver() as receiver:
        paths = [f"/innocent/{n}" for n in range(10)] + ["/hostile"]
        for path in paths:
            endpoint = Endpoint(url=receiver.url(path))
            endpoint.full_clean()
            endpoint.save()
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE pgqueue_endpoint SET headers = {UNDECODABLE_ARGS['deep']}"
                " WHERE url LIKE %s",
                ["%/hostile"],
            )
        event = send_event("order.paid", {"order_id": 1})
        run_worker(concurrency=4, timeout=90)
        posts = Counter(request.path for request in receiver.requests)

    assert posts == Counter(paths[:-1]), posts
    statuses = Counter(Delivery.objects.filter(event=event).values_list("endpoint__url", "status"))
    innocent = Counter(status for url, status in statuses if not url.endswith("/hostile"))
    assert innocent == {"succeeded": 10}, statuses
    hostile = DeliveryAttempt.objects.filter(delivery__endpoint__url__endswith="/hostile")
    assert hostile.count() >= 1
    assert all(
        a.error.startswith("not sent: RecursionError") and a.status_code is None for a in hostile
    ), [a.error for a in hostile]
    summary(
        faults=1,
        tasks=len(paths),
        duplicates=sum(posts.values()) - (len(paths) - 1),
        lost=10 - innocent["succeeded"],
        note="an endpoint's headers Python cannot decode; 10 innocent endpoints",
    )


def test_error_text_with_nul_and_lone_surrogates_is_stored_escaped(fast_leases, run_worker):
    from django_pgqueue.models import Job
    from testproject.demo import tasks

    innocent = [tasks.add.enqueue(n, n) for n in range(10)]
    hostile = tasks.fail_with_text.enqueue([ord("a"), 0, 0xDC80, ord("z")])
    run_worker(concurrency=4)
    job = Job.objects.get(pk=hostile.id)
    assert job.status == "dead" and job.attempts == 1
    assert job.last_error == "ValueError: a\\x00\\udc80z"
    assert "a\\x00\\udc80z" in job.errors[-1]["traceback"]
    assert [Job.objects.get(pk=r.id).result for r in innocent] == [n + n for n in range(10)]


def test_a_refused_outcome_is_written_alone_and_the_rest_of_its_batch_once(fast_leases):
    """A batch PostgreSQL refuses for one row's value (a retry delay beyond any
    timestamp) is written row by row: the innocent rows once, the bad row as dead
    with the database's reason."""
    from django_pgqueue.db import connect
    from django_pgqueue.models import Job
    from django_pgqueue.worker.completer import Completer
    from django_pgqueue.worker.runner import TaskRunner
    from django_pgqueue.worker.sources import JobSource
    from testproject.demo import tasks
    from testproject.demo.models import TaskRun

    innocent = [tasks.record_run.enqueue(label=f"innocent {n}") for n in range(20)]
    bad = tasks.fails_with_absurd_backoff.enqueue()
    source = JobSource(TaskRunner("w-test", 60.0))
    params = {"all_queues": True, "queues": [], "lease": 30.0, "worker_id": "w-test", "limit": 50}
    with connect("test-claim") as conn:
        claimed = source.claim(conn, params)
    assert len(claimed) == 21
    outcomes = [source.run(item) for item in claimed]  # real runs, one batch of outcomes
    held = {("jobs", item.id): item.token for item in claimed}
    reported: list[set] = []
    completer = Completer(
        worker_id="w-test",
        sources={"jobs": source},
        lease_seconds=30.0,
        retry_budget=1.0,
        held=held,
        held_lock=threading.Lock(),
        on_written=lambda batch, keys: reported.append(keys),
        test_hooks=frozenset(),
    )
    try:
        completer.write(source, outcomes)
    finally:
        completer._drop_connection()

    assert reported == [{("jobs", item.id) for item in claimed}]
    assert held == {}
    for result in innocent:
        job = Job.objects.get(pk=result.id)
        assert (job.status, job.result) == ("succeeded", 1)
    assert TaskRun.objects.count() == 20
    job = Job.objects.get(pk=bad.id)
    assert job.status == "dead"
    assert job.last_error.startswith("OutcomeNotStored: outcome could not be stored: ")
    assert "out of range" in job.last_error
    assert job.errors[-1]["exception_class_path"] == "django_pgqueue.exceptions.OutcomeNotStored"
