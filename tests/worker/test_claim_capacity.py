"""The claim loop sizes a claim from what it read under its lock, never from a flag a
task thread may change right after.

A task thread that finishes clears ``Worker._full`` once the rows held fall to the
refill level. The loop used to read that flag again after letting go of the lock,
and then claim ``free`` rows as computed under the lock: when the adaptive prefetch
had just shrunk below the rows held (slow or timed-out tasks), ``free`` was
negative, and the claim failed with "LIMIT must not be negative".
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from django_pgqueue.worker import Worker
from django_pgqueue.worker.atomic import AtomicJobSource
from django_pgqueue.worker.claim_state import PassResult, QuietSources

pytestmark = pytest.mark.django_db(transaction=True)


class FreesSlotsWhenReleased:
    """The worker's slot lock. The first time the claim loop lets go of it, ``n`` task
    threads finish (as real ones can at that instant): their ``_slot_freed`` runs."""

    def __init__(self, worker: Worker, n: int) -> None:
        self.lock = threading.Lock()
        self.worker = worker
        self.pending = n

    def __enter__(self) -> None:
        self.lock.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.lock.release()
        n, self.pending = self.pending, 0
        for _ in range(n):
            self.worker._slot_freed()


def test_a_slot_freed_as_the_pass_looks_cannot_make_the_claim_negative():
    source = AtomicJobSource("capacity-test")
    # Fixed prefetch 1: room for 3 rows, claims again at 2 or fewer held.
    worker = Worker(
        concurrency=2, prefetch=1, install_signal_handlers=False, sources=[source], notify=False
    )
    worker._inflight = 4  # held more than there is room for now: free = -1
    worker._inflight_lock = FreesSlotsWhenReleased(worker, 2)  # type: ignore[assignment]
    params = {"all_queues": True, "queues": [], "lease": 30.0, "worker_id": worker.worker_id}
    try:
        result = worker._claim_pass(params, QuietSources(1.0, worker.sources))
    finally:
        worker._drop_claim_connection()
    assert result is PassResult.FULL  # this pass saw no room; the freed slots wake the next
    assert worker._inflight == 2 and worker.wake.is_set()
