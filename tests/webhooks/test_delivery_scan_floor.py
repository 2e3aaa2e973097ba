"""The deliveries' claim above its scan floor: cheap while a session holds back the
xmin horizon, and never blind to a delivery an endpoint's limits held back, however
old (sql/deliveries.py, "The scan floor").

A floored claim walks the endpoints from a time floor (the last full claim's start)
and probes each endpoint the last full claim found with older work from that
endpoint's own floor; a delivery below both is claimed by the next full claim.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection
from psycopg import ClientCursor

from django_pgqueue import send_event, sql
from django_pgqueue.db import connect
from django_pgqueue.models import Delivery, Endpoint
from django_pgqueue.scan_floor import ScanFloor
from django_pgqueue.webhooks import store

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("webhooks_conf")]

URL = "http://127.0.0.1:9/hook"  # never contacted: these tests only claim
CHURNED = 4000


@pytest.fixture
def conn() -> Iterator[psycopg.Connection]:
    with connect("floor-test", prepare=True) as conn:
        yield conn


def params(floors: ScanFloor | None = None, limit: int = 10) -> dict[str, Any]:
    out: dict[str, Any] = {"limit": limit, "lease": 30.0, "worker_id": "floor-test"}
    if floors is not None:
        out["scan_floor"] = floors
    return out


def claim(
    conn: psycopg.Connection, floors: ScanFloor | None, max_in_flight: int | None = None
) -> list[int]:
    return [row[0] for row in store.claim(conn, params(floors), max_in_flight)]


def backdate(ids: list[int], seconds: float) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgqueue_delivery SET next_attempt_at = now() - make_interval(secs => %s)"
            " WHERE id = ANY(%s)",
            [seconds, ids],
        )


def finish(ids: list[int]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgqueue_delivery SET status = 'succeeded', locked_until = NULL,"
            " finished_at = now() WHERE id = ANY(%s)",
            [ids],
        )


def deliveries_of(event_type: str) -> list[int]:
    return list(
        Delivery.objects.filter(event__event_type=event_type)
        .order_by("id")
        .values_list("id", flat=True)
    )


def test_a_floored_claim_takes_what_an_endpoints_limit_held_back_below_the_time_floor(
    conn, fast_scan_floor
):
    """The case a floor in time alone gets wrong: an endpoint at its in-flight limit
    holds old deliveries back; when room frees, the floored claim finds them from
    the endpoint's own floor."""
    floors = fast_scan_floor
    Endpoint.objects.create(url=URL, event_types=["held"], max_in_flight=1)
    send_event("held", {"n": 1})
    send_event("held", {"n": 2})
    first, second = deliveries_of("held")
    backdate([first, second], 60)
    assert claim(conn, floors) == [first]  # full: the floors are read
    assert floors.kept("claim_deliveries") is not None
    assert claim(conn, floors) == []  # floored; the endpoint is at its limit
    finish([first])
    assert claim(conn, floors) == [second]  # floored: 60 s below the time floor
    assert floors.age("claim_deliveries", time.monotonic()) is not None


def test_a_floored_claim_finds_an_endpoint_new_since_the_last_full_claim(conn, fast_scan_floor):
    floors = fast_scan_floor
    assert claim(conn, floors) == []  # full, short: no endpoint had work
    Endpoint.objects.create(url=URL, event_types=["new"])
    send_event("new", {"n": 1})
    assert floors.age("claim_deliveries", time.monotonic()) is not None
    assert claim(conn, floors) == deliveries_of("new")  # floored: due now, above


def test_a_delivery_below_every_floor_goes_at_the_next_full_claim(conn, fast_scan_floor):
    """Written by a transaction that began long before it committed: below the time
    floor, of an endpoint the last full claim did not see. Never lost: the next full
    claim takes it."""
    floors = fast_scan_floor
    assert claim(conn, floors) == []
    Endpoint.objects.create(url=URL, event_types=["late"])
    send_event("late", {"n": 1})
    (late,) = deliveries_of("late")
    backdate([late], 30)
    assert claim(conn, floors) == []  # floored
    time.sleep(0.5)
    assert claim(conn, floors) == [late]  # the next full claim


def test_an_old_backlog_drains_through_floored_claims(conn, fast_scan_floor):
    """A full claim that fills its limit still reads the floors: the floored claims
    after it take the rest of the backlog from the endpoint's floor, an hour below
    the time floor."""
    floors = fast_scan_floor
    Endpoint.objects.create(url=URL, event_types=["many"])
    for n in range(25):
        send_event("many", {"n": n})
    ids = deliveries_of("many")
    backdate(ids, 3600)
    taken = [claim(conn, floors) for _ in range(4)]
    assert [len(t) for t in taken] == [10, 10, 5, 0]
    assert sorted(i for t in taken for i in t) == ids
    assert floors.age("claim_deliveries", time.monotonic()) is not None  # floored


def churn(conn: psycopg.Connection, template: int, n: int) -> None:
    """``n`` deliveries added and finished, as a busy endpoint leaves them: each one's
    pending version dead at the endpoint's head of the due index."""
    columns = [
        name
        for (name,) in conn.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_name = 'pgqueue_delivery' AND column_name NOT IN ('id', 'event_id')"
            " ORDER BY ordinal_position"
        )
    ]
    names = ", ".join(columns)
    # Due before the endpoint's live head: their dead versions lie in front of it.
    values = ", ".join(
        "d.next_attempt_at - interval '1 hour'" if c == "next_attempt_at" else f"d.{c}"
        for c in columns
    )
    conn.execute(
        f"""WITH ev AS (
            INSERT INTO pgqueue_event (event_type, payload, body, msg_id, created_at, channels)
            SELECT e.event_type, e.payload, e.body, gen_random_uuid()::text, now(), e.channels
            FROM pgqueue_event AS e JOIN pgqueue_delivery AS t ON t.event_id = e.id,
                 generate_series(1, %(n)s)
            WHERE t.id = %(template)s RETURNING id
        )
        INSERT INTO pgqueue_delivery (event_id, {names})
        SELECT ev.id, {values} FROM ev, pgqueue_delivery AS d WHERE d.id = %(template)s""",
        {"n": n, "template": template},
    )
    conn.execute(
        "UPDATE pgqueue_delivery SET status = 'succeeded', finished_at = now()"
        " WHERE status = 'pending' AND id <> %s",
        [template],
    )


def heap_fetches(conn: psycopg.Connection, values: dict[str, Any]) -> int:
    """Heap tuples one claim's index-only scans fetched to check their visibility (the
    walk and the "has it a delivery due?" probe), by EXPLAIN (ANALYZE), rolled back."""
    conn.execute("BEGIN")
    try:
        with ClientCursor(conn) as cur:
            cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql.CLAIM_DELIVERIES, values)
            (plan,) = cur.fetchone()
    finally:
        conn.execute("ROLLBACK")
    if isinstance(plan, str):
        plan = json.loads(plan)

    def fetched(node: dict[str, Any]) -> int:
        own = int(node.get("Heap Fetches", 0)) * int(node.get("Actual Loops", 1))
        return own + sum(fetched(child) for child in node.get("Plans", []))

    return fetched(plan[0]["Plan"])


def test_a_pinned_horizon_does_not_make_a_floored_claim_read_the_dead_head(conn, fast_scan_floor):
    floors = fast_scan_floor
    Endpoint.objects.create(url=URL, event_types=["busy"])
    send_event("busy", {"n": 0})
    (template,) = deliveries_of("busy")
    backdate([template], 3600)  # the backlog's oldest: an hour old, held by nothing
    with connect("floor-pin", prepare=False) as pin:
        pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        pin.execute("SELECT count(*) FROM pgqueue_delivery").fetchone()
        churn(conn, template, CHURNED)
        conn.execute("VACUUM pgqueue_delivery")  # removes nothing the pin can see
        # A full claim that comes back short: the endpoints' floors are read.
        limit = 10
        full_values = {**params(limit=limit), **sql.FULL_CLAIM, "max_in_flight": 0}
        assert store.claim(conn, {**params(floors), "limit": limit}, 0) == []  # in-flight 0
        ids, ats = floors.kept("claim_deliveries")
        age = floors.age("claim_deliveries", time.monotonic())
        floored_values = {**full_values, "floor": age, "floor_ids": ids, "floor_ats": ats}
        full = heap_fetches(conn, {**full_values, "max_in_flight": None})
        floored = heap_fetches(conn, {**floored_values, "max_in_flight": None})
        pin.execute("ROLLBACK")
    # The template is claimed by both; the full claim's walk and probe also fetch
    # every dead pending version under the endpoint's head (and the take, an index
    # scan, the same again), the floored claim's none of them.
    assert full >= 2 * CHURNED, full
    assert floored < 50, floored
