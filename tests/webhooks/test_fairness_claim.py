"""The fair, throttled delivery claim, statement by statement: per-endpoint in-flight
limits enforced by the claim itself (also between claims racing on two connections),
round robin over endpoints, rate limits and FIFO heads, and a claim cost that does not
grow with a backlog."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.db import connection

from django_pgqueue import send_event, sql
from django_pgqueue.db import connect
from django_pgqueue.models import Delivery, Endpoint

from ..conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("webhooks_conf")]

URL = "http://127.0.0.1:9/hook"  # never contacted: these tests only claim


def params(limit: int = 100, max_in_flight: int | None = None) -> dict[str, Any]:
    return {
        "limit": limit,
        "lease": 30.0,
        "worker_id": "test",
        "max_in_flight": max_in_flight,
    }


def claim(limit: int = 100, max_in_flight: int | None = None, conn: Any = None) -> list[tuple]:
    if conn is not None:
        return conn.execute(sql.CLAIM_DELIVERIES, params(limit, max_in_flight)).fetchall()
    with connect("test-claim") as own:
        return own.execute(sql.CLAIM_DELIVERIES, params(limit, max_in_flight)).fetchall()


def per_endpoint(rows: list[tuple]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for row in rows:
        counts[row[5]] = counts.get(row[5], 0) + 1
    return counts


def endpoints(n: int, **fields: Any) -> list[Endpoint]:
    """``n`` endpoints, each subscribed to its own event type ``e<i>``."""
    return [Endpoint.objects.create(url=URL, event_types=[f"e{i}"], **fields) for i in range(n)]


def send(i: int, count: int, **kwargs: Any) -> None:
    for n in range(count):
        send_event(f"e{i}", {"n": n}, **kwargs)


def finish(endpoint: Endpoint, count: int) -> None:
    """Mark ``count`` in-flight deliveries of ``endpoint`` done, as a completion would."""
    ids = list(
        Delivery.objects.filter(endpoint=endpoint, status="in_progress")
        .order_by("id")
        .values_list("id", flat=True)[:count]
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgqueue_delivery SET status = 'succeeded', locked_until = NULL, "
            "finished_at = now() WHERE id = ANY(%s)",
            [ids],
        )


def test_in_flight_limit_is_enforced_by_the_claim_across_endpoints():
    eps = endpoints(3)
    for i in range(3):
        send(i, 10)
    rows = claim(max_in_flight=2)
    # Not the 30 oldest of one endpoint: two of each, the limit, and nothing handed back.
    assert per_endpoint(rows) == {ep.pk: 2 for ep in eps}
    assert Delivery.objects.filter(status="in_progress").count() == 6
    assert claim(max_in_flight=2) == []  # every endpoint is at its limit
    finish(eps[1], 1)
    assert per_endpoint(claim(max_in_flight=2)) == {eps[1].pk: 1}
    # The endpoint's own limit wins over the global default.
    Endpoint.objects.filter(pk=eps[0].pk).update(max_in_flight=5)
    assert per_endpoint(claim(max_in_flight=2)) == {eps[0].pk: 3}


def test_round_robin_serves_the_least_recently_served_endpoint_first():
    eps = endpoints(4)
    for i in range(4):
        send(i, 5)
    order = [sorted(per_endpoint(claim(limit=2))) for _ in range(4)]
    ids = [ep.pk for ep in eps]
    # Each claim of 2 spreads over two endpoints, and the next claim goes on with
    # the two that were not served: round robin, not the oldest backlog first.
    assert order == [ids[:2], ids[2:], ids[:2], ids[2:]]


def test_a_claim_whose_snapshot_predates_a_commit_cannot_exceed_the_limit():
    """Two claims race: the second starts while the first is uncommitted, so its
    snapshot cannot see the first's rows. It waits for the endpoint's row lock and
    then drops the endpoint (served since its snapshot) instead of taking more."""
    (ep,) = endpoints(1)
    send(0, 10)
    first = connect("test-first")
    second = connect("test-second")
    try:
        first.execute("BEGIN")
        assert len(claim(conn=first, max_in_flight=3)) == 3
        result: dict[str, list[tuple]] = {}
        thread = threading.Thread(
            target=lambda: result.setdefault("rows", claim(conn=second, max_in_flight=3))
        )
        thread.start()

        def waiting() -> bool:
            with connect("test-watch") as watch:
                return bool(
                    watch.execute(
                        "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND application_name = 'pgqueue-test-second'"
                    ).fetchone()
                )

        wait_for(waiting, 10, "the second claim to wait for the endpoint's row lock")
        first.execute("COMMIT")
        thread.join(10)
        assert result["rows"] == []
    finally:
        first.close()
        second.close()
    assert Delivery.objects.filter(endpoint=ep, status="in_progress").count() == 3
    assert len(claim(max_in_flight=3)) == 0


def test_many_concurrent_claims_never_hold_more_than_the_limit():
    eps = endpoints(3, max_in_flight=4)
    for i in range(3):
        send(i, 20)
    barrier = threading.Barrier(8)
    lock = threading.Lock()
    taken: list[tuple] = []

    def run(i: int) -> None:
        with connect(f"test-race-{i}") as conn:
            barrier.wait(10)
            for _ in range(5):
                rows = claim(limit=7, conn=conn)
                with lock:
                    taken.extend(rows)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert per_endpoint(taken) == {ep.pk: 4 for ep in eps}
    assert len({row[0] for row in taken}) == len(taken) == 12


def test_rate_limit_takes_tokens_and_leaves_the_rest_waiting_without_attempts():
    (ep,) = endpoints(1, rate_limit=3, rate_period=60)
    send(0, 10)
    assert len(claim()) == 3  # a full bucket: three requests at once
    finish(ep, 3)
    assert claim() == []  # no token left: the next one is 20 s away
    waiting = Delivery.objects.filter(endpoint=ep, status="pending")
    assert waiting.count() == 7 and {d.attempts for d in waiting} == {0}
    # Twenty seconds later one token is back (the bucket refills continuously).
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgqueue_endpoint SET rate_tat = rate_tat - interval '20 seconds' WHERE id = %s",
            [ep.pk],
        )
    assert len(claim()) == 1


def test_fifo_claims_only_the_head_of_each_key():
    (ep,) = endpoints(1, ordering="key")
    for n in range(3):
        send_event("e0", {"n": n}, ordering_key="order-1")
        send_event("e0", {"n": n}, ordering_key="order-2")
    send_event("e0", {"n": 9})  # no key: not ordered
    bodies = [json.loads(row[12]) for row in claim()]
    assert sorted(b["n"] for b in bodies) == [0, 0, 9]
    assert claim() == []  # both heads are in flight
    first = Delivery.objects.filter(endpoint=ep, ordering_key="order-1").order_by("id")[0]
    # A failed head keeps its key waiting; the other key goes on.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgqueue_delivery SET status = 'failed', locked_until = NULL, "
            "next_attempt_at = now() + interval '1 hour' WHERE id = %s",
            [first.pk],
        )
    finish(ep, 10)  # order-2's head and the keyless one
    rows = claim()
    assert [(json.loads(r[12])["n"], r[0]) for r in rows] == [
        (1, Delivery.objects.filter(ordering_key="order-2").order_by("id")[1].pk)
    ]


def test_endpoint_wide_fifo_sends_one_at_a_time_in_event_order():
    (ep,) = endpoints(1, ordering="endpoint")
    send(0, 4)
    seen = []
    for _ in range(4):
        rows = claim()
        assert len(rows) == 1
        seen.append(json.loads(rows[0][12])["n"])
        assert claim() == []
        finish(ep, 1)
    assert seen == [0, 1, 2, 3]


def buffers_of_claim(limit: int = 10) -> int:
    """Shared buffers the claim statement touches (hit + read), from EXPLAIN ANALYZE."""
    with connect("test-explain") as conn:
        conn.execute("BEGIN")
        plan = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql.CLAIM_DELIVERIES,
            params(limit, 2),
        ).fetchone()[0]
        conn.execute("ROLLBACK")
    top = plan[0]["Plan"]
    return top["Shared Hit Blocks"] + top["Shared Read Blocks"]


def plan_text() -> str:
    with connect("test-explain") as conn:
        rows = conn.execute("EXPLAIN " + sql.CLAIM_DELIVERIES, params(10, 2)).fetchall()
    return "\n".join(r[0] for r in rows)


def test_claim_cost_stays_flat_behind_a_large_backlog_and_uses_the_partial_indexes():
    slow, fast = endpoints(2)

    def backlog(n: int, tag: str) -> None:
        # A slow endpoint's backlog, all due and older than everything else.
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO pgqueue_event (event_type, payload, body, msg_id, created_at) "
                "SELECT 'e0', '{}', '{}', %s || g, now() FROM generate_series(1, %s) g",
                [f"msg_{tag}_", n],
            )
            cursor.execute(
                "INSERT INTO pgqueue_delivery (event_id, endpoint_id, status, "
                "attempts, max_attempts, next_attempt_at, worker_id, last_error, "
                "created_at, updated_at) SELECT ev.id, %s, 'pending', 0, 5, "
                "now() - interval '1 hour', '', '', now(), now() FROM pgqueue_event ev "
                "WHERE ev.event_type = 'e0' AND NOT EXISTS (SELECT 1 FROM "
                "pgqueue_delivery d WHERE d.event_id = ev.id)",
                [slow.pk],
            )
            cursor.execute("ANALYZE pgqueue_delivery")
            cursor.execute("ANALYZE pgqueue_endpoint")

    backlog(200, "small")
    # The slow endpoint sits at its limit (2) with its oldest deliveries in flight.
    with connect("test-fill") as conn:
        conn.execute(sql.CLAIM_DELIVERIES, {**params(2, 2)})
    assert Delivery.objects.filter(endpoint=slow, status="in_progress").count() == 2
    send(1, 20)
    small = buffers_of_claim()
    backlog(20_000, "large")
    large = buffers_of_claim()
    # 100x the backlog: the claim reads the same few pages (a full scan would read
    # hundreds more), and goes through the partial indexes. Each index descent reads
    # one page more once the due index has grown a level (about two dozen descents
    # per claim: the walk, each candidate's due and in-flight probes, the picks).
    assert large <= small + 40, (small, large)
    text = plan_text()
    assert "pgq_dlv_due_idx" in text and "pgq_dlv_flight_idx" in text
    assert "Seq Scan on pgqueue_delivery" not in text
    rows = claim(max_in_flight=2)
    assert per_endpoint(rows) == {fast.pk: 2}


@pytest.mark.parametrize("key", ["", "x" * 256, 42])
def test_a_bad_ordering_key_is_refused_and_nothing_is_written(key):
    endpoints(1, ordering="key")
    with pytest.raises(ValueError, match="ordering_key must be None or 1 to 255 visible ASCII"):
        send_event("e0", {"n": 1}, ordering_key=key)
    assert not Delivery.objects.exists()


def test_admin_form_save_leaves_the_claim_state_alone():
    (ep,) = endpoints(1, rate_limit=5)
    send(0, 3)
    stale = Endpoint.objects.get(pk=ep.pk)  # loaded before the claim
    claim()
    fresh = Endpoint.objects.get(pk=ep.pk)
    assert fresh.served_at is not None and fresh.rate_tat is not None
    stale.description = "edited"
    stale.save()  # a form loaded earlier, saved after the claim
    after = Endpoint.objects.get(pk=ep.pk)
    assert after.description == "edited"
    assert (after.served_at, after.rate_tat) == (fresh.served_at, fresh.rate_tat)


def test_the_claim_commits_asynchronously() -> None:
    """Like the job claims (tests/worker/test_claim_commit.py): a claim PostgreSQL
    forgets in its own crash is claimed again; completions stay synchronous."""
    endpoints(1)
    send(0, 1)
    with connect("test-claim") as conn:
        with conn.transaction():
            assert len(claim(conn=conn)) == 1
            assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "off"
        assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "on"
