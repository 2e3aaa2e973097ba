"""The console's rollup rows of ``pgqueue_bench``: what counting a batch of completions
costs, per job, at the batch sizes a worker writes.

One connection opened as the worker opens its own claims a batch of no-op jobs and
completes it, through the worker's own ``JobSource``, alternately with the rollup on
(the completion statement also adds the batch's counts, ``sql/jobs.py``'s
``COMPLETE_COUNTED_JOBS``) and off (``COMPLETE_JOBS``), batch after batch, in an
ABBA order so that neither side always runs first. Measured around the completion
only: the thread's CPU time (``time.thread_time``) plus its backend's
(``/proc/<pid>/schedstat``, in nanoseconds: the 10 ms ticks of ``/proc/<pid>/stat``
are coarser than one batch). A drain's batches hold a few hundred rows; slow tasks
complete a few at a time, which is where a cost per batch shows.
"""

from __future__ import annotations

import time
from typing import Any

from .. import sql
from ..outcomes import JobOutcome
from ..rollup import store as rollup_store
from .rows import Row

#: The running benchmark (``core.Bench``): typed loosely, as in ``pickup.py``.
Bench = Any

#: Batch sizes measured: a few slow tasks at a time, a busy worker, a drain.
BATCHES = (10, 50, 250)
#: Batches of each side, at least, per batch size and repetition.
MIN_BATCHES = 4
#: Completions the rollup counted (the bench checks it counted every one on its side).
COUNTED = f"SELECT COALESCE(sum(ok), 0) FROM {sql.ROLLUP_TABLE}"  # noqa: S608 - a module constant


def backend_seconds(pid: int) -> float:
    """CPU time of a backend so far (``schedstat``: nanoseconds on a CPU); 0 if unreadable."""
    try:
        with open(f"/proc/{pid}/schedstat") as fh:
            return int(fh.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def bench_rollup(bench: Bench) -> None:
    rows = {
        size: bench.add(
            Row(
                "rollup",
                f"completion CPU per job, batches of {size}, rollup on",
                "µs",
                reference="the same completions, rollup off",
                better="lower",
                extra={"batch": size},
            )
        )
        for size in BATCHES
    }
    for rep in range(bench.repeat):
        for size, row in rows.items():
            on, off, counted = _alternate(bench, size)
            row.values.append(on)
            row.ref_values.append(off)
            bench.out(
                f"   rep {rep + 1}, batches of {size}: on {on:.1f} µs, off {off:.1f} µs per "
                f"job (+{on - off:.1f} µs); {counted} completions counted"
            )


def _alternate(bench: Bench, size: int) -> tuple[float, float, int]:
    """(µs per job with the rollup on, off, completions the rollup counted)."""
    from ..worker.runner import TaskRunner
    from ..worker.sources import JobSource, tagged

    batches = max(MIN_BATCHES, bench.n_drain // (2 * size)) // 2 * 2
    bench.reset()
    bench.sql(f"TRUNCATE {sql.ROLLUP_TABLE}")
    bench.preload(2 * batches * size)
    source = JobSource(TaskRunner("bench-rollup", 60.0))
    params = {"all_queues": True, "queues": [], "limit": size, "lease": 60.0}
    spent = {True: 0.0, False: 0.0}
    jobs = {True: 0, False: 0}
    with bench.conn() as conn:
        pid = conn.info.backend_pid
        params["worker_id"] = "bench-rollup"
        for i in range(2 * batches):
            counting = i % 4 in (0, 3)  # ABBA
            claimed = source.claim(conn, params)
            batch = [
                tagged(c, JobOutcome(c.id, c.token, "succeeded", result_json="null"))
                for c in claimed
            ]
            t0, b0 = time.thread_time(), backend_seconds(pid)
            if counting:  # what rollup_store.complete_counted_jobs does with it on
                counts = rollup_store.record_params(rollup_store.aggregate_jobs(batch))
                source.complete(conn, batch, counts)
            else:
                source.complete(conn, batch)
            spent[counting] += time.thread_time() - t0 + backend_seconds(pid) - b0
            jobs[counting] += len(batch)
        counted = conn.execute(COUNTED).fetchone()[0]
    return (
        spent[True] / max(jobs[True], 1) * 1e6,
        spent[False] / max(jobs[False], 1) * 1e6,
        int(counted),
    )
