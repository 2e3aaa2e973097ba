"""Connection faults: pg_terminate_backend mid-claim and mid-completion, an ambiguous
commit, and an outage longer than the completion retry budget (catalogue F2, F3, F4).

The worker must survive each fault in the same process, and the lease is the
backstop for anything it cannot write.
"""

from __future__ import annotations

import signal
import time

import pytest

from .conftest import LEASE, worker_env
from .helpers import (
    AutoResume,
    count_text,
    enqueue_sql,
    job,
    ledger,
    line_index,
    paused_fields,
    terminate,
    wait_terminal,
    wait_text,
)

pytestmark = [pytest.mark.fault, pytest.mark.timeout(60), pytest.mark.django_db(transaction=True)]

MARKER = b"/* pgqueue:complete */"


def _stop(proc) -> None:
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0, proc.output()


def test_terminate_worker_backend_inside_claim_transaction(worker_process, test_dsn, summary):
    """F2a: the claim's transaction dies with its session; nothing stays held by nobody."""
    from testproject.demo import tasks

    job_id = int(tasks.record_run.enqueue("f2a").id)
    w = worker_process(
        "--worker-id",
        "f2a",
        "--concurrency",
        "1",
        env=worker_env(PGQUEUE_TEST_PAUSE_AT="inside_claim_tx"),
    )
    line = w.wait_line("PAUSED inside_claim_tx")
    assert line.split()[2:] == [str(job_id)]
    assert terminate(test_dsn, "pgqueue-worker-f2a") == 1
    faulted = time.monotonic()
    resumer = AutoResume(w, line_index(w) - 1)  # answers this pause and every later one
    book = wait_terminal(test_dsn, [job_id], timeout=15)
    recover = time.monotonic() - faulted
    resumer.stop()
    row = job(test_dsn, job_id)
    # The terminated claim rolled back: attempt 1 is the retry's, with no lease lapse.
    assert (row["status"], row["attempts"], row["errors"]) == ("succeeded", 1, [])
    assert book.runs == 1
    assert w.proc.poll() is None  # the same process survived
    assert count_text(w, "Claim failed") == 1, w.output()
    w.proc.stdin.write("\n" * 4)  # release any pause still pending during shutdown
    w.proc.stdin.flush()
    _stop(w)
    summary(
        faults=1,
        tasks=1,
        duplicates=book.duplicates,
        lost=0,
        recover=recover,
        note="pg_terminate_backend inside the claim transaction",
    )


def test_terminate_completion_backend_before_complete(worker_process, test_dsn, summary):
    """F2b: the completion retries on a new connection; the job ran exactly once."""
    from testproject.demo import tasks

    # The task outlives one lease extension, so the completer's session exists.
    job_id = int(tasks.record_run.enqueue("f2b", sleep=LEASE / 2).id)
    w = worker_process(
        "--worker-id",
        "f2b",
        "--concurrency",
        "1",
        env=worker_env(PGQUEUE_TEST_PAUSE_AT="before_complete"),
    )
    _, paused_id, token = paused_fields(w.wait_line("PAUSED before_complete"))
    assert paused_id == job_id
    assert terminate(test_dsn, "pgqueue-complete-f2b") == 1
    faulted = time.monotonic()
    w.resume()
    book = wait_terminal(test_dsn, [job_id], timeout=10)
    recover = time.monotonic() - faulted
    row = job(test_dsn, job_id)
    assert (row["status"], row["attempts"], row["locked_by"]) == ("succeeded", 1, token)
    assert book.runs == 1 and book.duplicates == 0
    assert w.proc.poll() is None
    assert count_text(w, "Completion write failed") == 1, w.output()
    _stop(w)
    summary(
        faults=1,
        tasks=1,
        duplicates=0,
        lost=0,
        recover=recover,
        note="pg_terminate_backend right before the completion write",
    )


def test_ambiguous_commit_of_a_completion_is_settled_not_redone(
    worker_process, cluster_db, fault_proxy, summary
):
    """F3: COMMIT reached the server but its reply was lost; the worker checks, sees its own
    write, and neither fails the job nor writes again."""
    ids = enqueue_sql(cluster_db.dsn, 20)
    fault_proxy.cut_after_marker(MARKER)
    w = worker_process(
        "--concurrency",
        "4",
        "--no-notify",
        env=worker_env(DATABASE_URL=fault_proxy.dsn_for(cluster_db.url)),
    )
    assert fault_proxy.wait_for_cut(20), w.output()
    cut_at = time.monotonic()
    book = wait_terminal(cluster_db.dsn, ids, timeout=15)
    recover = time.monotonic() - cut_at
    assert book.states == {"succeeded": 20}
    assert book.runs == 20 and book.duplicates == 0
    for job_id in ids:
        row = job(cluster_db.dsn, job_id)
        assert (row["attempts"], row["errors"]) == (1, []), row
    assert fault_proxy.cuts == 1
    assert count_text(w, "lease lost") == 0, w.output()
    assert count_text(w, "Could not write") == 0
    _stop(w)
    summary(
        faults=1,
        tasks=20,
        duplicates=0,
        lost=0,
        recover=recover,
        note="COMMIT reply of a completion batch lost",
    )


def test_outage_longer_than_completion_budget_keeps_the_outcome(
    worker_process, cluster_db, fault_proxy, summary
):
    """F4: the database is unreachable for longer than COMPLETION_RETRY_SECONDS after the task
    ran; the worker keeps the outcome (and the row) instead of discarding it, and writes it
    once the database answers: the job does not run again."""
    (job_id,) = enqueue_sql(cluster_db.dsn, 1, args=["f4"])
    w = worker_process(
        "--concurrency",
        "1",
        "--no-notify",
        env=worker_env(
            DATABASE_URL=fault_proxy.dsn_for(cluster_db.url),
            PGQUEUE_TEST_PAUSE_AT="after_task",
            PGQUEUE_COMPLETION_RETRY_SECONDS="1",
        ),
    )
    _, paused_id, token = paused_fields(w.wait_line("PAUSED after_task"))
    assert paused_id == job_id
    fault_proxy.down()
    start = line_index(w)
    w.resume()
    wait_text(w, "Database unreachable: could not write 1 outcome", timeout=10, start=start)
    row = job(cluster_db.dsn, job_id)
    assert (row["status"], row["locked_by"]) == ("in_progress", token)  # nothing written yet
    time.sleep(LEASE + 1)  # the lease lapses by the database's clock meanwhile
    fault_proxy.up()
    restored = time.monotonic()
    book = wait_terminal(cluster_db.dsn, [job_id], timeout=20)
    recover = time.monotonic() - restored
    row = job(cluster_db.dsn, job_id)
    assert (row["status"], row["attempts"]) == ("succeeded", 1)
    assert book.runs == 1 and book.duplicates == 0
    assert "lease lost" not in w.output() and "another claim owns it" not in w.output()
    assert w.proc.poll() is None
    _stop(w)
    summary(
        faults=1,
        tasks=1,
        duplicates=book.duplicates,
        lost=0,
        recover=recover,
        note="outage > COMPLETION_RETRY_SECONDS (1s); outcome kept and written",
    )


@pytest.mark.timeout(120)
def test_twenty_second_outage_mid_drain_reruns_no_succeeded_job(
    worker_process, cluster_db, fault_proxy, summary
):
    """PostgreSQL unreachable for 20 s (ten leases) in the middle of a drain: every outcome
    that was produced is written when it returns; zero lost, zero succeeded jobs run twice."""
    ids = enqueue_sql(cluster_db.dsn, 60, kwargs={"sleep": 0.1})
    w = worker_process(
        "--concurrency",
        "2",
        env=worker_env(
            DATABASE_URL=fault_proxy.dsn_for(cluster_db.url),
            PGQUEUE_TEST_HOOKS="0",
            PGQUEUE_COMPLETION_RETRY_SECONDS="10",
        ),
    )
    deadline = time.monotonic() + 30
    while ledger(cluster_db.dsn, ids).states.get("succeeded", 0) < 10:
        assert time.monotonic() < deadline, w.output()
        time.sleep(0.05)
    fault_proxy.down()
    time.sleep(20)
    fault_proxy.up()
    restored = time.monotonic()
    book = wait_terminal(cluster_db.dsn, ids, timeout=60)
    recover = time.monotonic() - restored
    assert book.lost == [] and book.tasks == 60
    assert book.states == {"succeeded": 60}, book
    assert book.duplicates == 0, w.output()
    assert "lease lost" not in w.output()
    assert w.proc.poll() is None
    _stop(w)
    summary(
        faults=1,
        tasks=60,
        duplicates=book.duplicates,
        lost=0,
        recover=recover,
        note="20 s outage mid-drain, lease 2 s",
    )


def test_connection_reset_storm_loses_nothing(worker_process, cluster_db, fault_proxy, summary):
    """RST every worker connection several times while 300 jobs run."""
    ids = enqueue_sql(cluster_db.dsn, 300, kwargs={"sleep": 0.005})
    w = worker_process(
        "--concurrency",
        "4",
        env=worker_env(DATABASE_URL=fault_proxy.dsn_for(cluster_db.url), PGQUEUE_LOG_LEVEL="ERROR"),
    )
    resets = 0
    first = None
    for threshold in (50, 120, 200):
        deadline = time.monotonic() + 20
        while ledger(cluster_db.dsn, ids).runs < threshold and time.monotonic() < deadline:
            time.sleep(0.02)
        fault_proxy.reset_peer()
        resets += 1
        first = first or time.monotonic()
    last = time.monotonic()
    book = wait_terminal(cluster_db.dsn, ids, timeout=30)
    recover = time.monotonic() - last
    assert book.states.get("succeeded", 0) + book.states.get("dead", 0) == 300
    assert not book.lost
    assert w.proc.poll() is None
    _stop(w)
    summary(
        faults=resets,
        tasks=300,
        duplicates=book.duplicates,
        lost=0,
        recover=recover,
        note="RST of every worker connection x3 under load",
    )
