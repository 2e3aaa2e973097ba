"""Message queues in operations: ``pgqueue_status`` (depth, oldest, dead letters, exit
codes at thresholds) and the Prometheus gauges. A stalled queue must not exit 0."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from django_pgqueue import mq

pytestmark = pytest.mark.django_db(transaction=True)


def status(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("pgqueue_status", *args, stdout=out, stderr=err)
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def backdate(name: str, seconds: int) -> None:
    """Messages of ``name`` sent and visible ``seconds`` ago: a queue nobody reads."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE pgqueue_mq_q_{name} SET enqueued_at = now() - make_interval(secs => %s),"
            " vt = now() - make_interval(secs => %s)",
            [seconds, seconds],
        )


def test_status_reports_each_message_queue():
    mq.create("orders_dead")
    mq.create("orders", max_reads=1, dead_letter="orders_dead")
    mq.send_batch("orders", [{"n": i} for i in range(4)])
    mq.send("orders", {"n": "later"}, delay=3600)
    mq.read("orders", vt=60, qty=1)
    code, out, _ = status("--json")
    assert code == 0
    queues = {q["name"]: q for q in json.loads(out)["message_queues"]}
    orders = queues["orders"]
    assert (orders["messages"], orders["visible"], orders["in_flight"], orders["delayed"]) == (
        5,
        3,
        1,
        1,
    )
    assert orders["dead_letter"] == "orders_dead" and orders["oldest_visible_seconds"] >= 0
    assert queues["orders_dead"]["dead_letters"] == 0 and orders["dead_letters"] is None
    code, text, _ = status()
    assert "Message queues" in text and "orders_dead" in text


def test_a_stalled_message_queue_exits_2():
    mq.create("stalled")
    mq.send("stalled", {"waiting": True})
    backdate("stalled", 600)
    assert status("--max-oldest-due", "15m")[0] == 0
    code, _, err = status("--max-oldest-due", "5m")
    assert code == 2
    assert "message queue 'stalled': the oldest visible message has waited" in err
    assert "(--max-oldest-due 300s)" in err


def test_dead_letters_count_against_max_dead():
    mq.create("jobs_dead")
    mq.create("jobs", max_reads=1, dead_letter="jobs_dead")
    mq.send("jobs", {"poison": True})
    mq.read("jobs", vt=0)
    assert mq.read("jobs", vt=0) == []  # moved to jobs_dead
    code, out, _ = status("--json", "--max-dead", "0")
    assert code == 2
    data = json.loads(out)
    assert {q["name"]: q["dead_letters"] for q in data["message_queues"]}["jobs_dead"] == 1
    assert "1 row(s) in the dead-letter queue (--max-dead 0)" in data["problems"]


def test_prometheus_gauges_of_message_queues():
    pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    from django_pgqueue.metrics import WorkerMetrics

    mq.create("gauged")
    mq.send_batch("gauged", [{}, {}])
    mq.read("gauged", vt=60)
    backdate("gauged", 0)
    text = WorkerMetrics().exposition().decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("pgqueue_mq_messages", (("queue", "gauged"), ("state", "visible")))] == 2
    assert samples[("pgqueue_mq_messages", (("queue", "gauged"), ("state", "in_flight")))] == 0
    assert ("pgqueue_mq_oldest_visible_seconds", (("queue", "gauged"),)) in samples
