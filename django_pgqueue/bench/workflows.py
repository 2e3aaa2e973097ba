"""Workflows in the benchmark: steps per second for chains and for a wide fan-out and
fan-in, against plain jobs drained by the same worker in the same run, and the cost
of a release (docs/workflows.md, docs/performance.md).

* ``plain``: ``n`` no-op jobs (the reference).
* ``chains``: ``n / 10`` chains of 10 no-op steps: each step is released by its
  parent's completion, so a worker always has ``n / 10`` steps due at most.
* ``fan-out / fan-in``: one root, ``n`` children, one sink waiting for all of them.
* ``release``: the worker's own claim and completion statements in one loop, 100
  rows a batch, over plain jobs and over roots that each release a child: the
  difference per row is what a release costs.
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

from django.db import connections

from .. import sql
from .rows import Row

#: The running benchmark (``core.Bench``), which imports this module to run it.
Bench = Any

CHAIN_LENGTH = 10
BATCH = 100


def _noop(bench: Bench) -> Any:
    return bench.noop()


def _chains(bench: Bench, n: int) -> None:
    from ..workflows import call, chain

    task = _noop(bench)
    for _ in range(n // CHAIN_LENGTH):
        chain(*(call(task) for _ in range(CHAIN_LENGTH)), name="bench-chain").enqueue()
    connections[bench.alias].close()


def _fan(bench: Bench, n: int) -> None:
    from ..workflows import Workflow

    task = _noop(bench)
    wf = Workflow("bench-fan")
    root = wf.add(task, step_name="root")
    children = [wf.add(task, after=[root], step_name=f"c{i}") for i in range(n)]
    wf.add(task, after=children, step_name="sink")
    wf.enqueue()
    connections[bench.alias].close()


def _pairs(bench: Bench, n: int) -> None:
    """``n`` roots, each with one waiting child (one workflow: one enqueue)."""
    from ..workflows import Workflow

    task = _noop(bench)
    wf = Workflow("bench-release")
    for i in range(n):
        wf.add(task, after=[wf.add(task, step_name=f"r{i}")], step_name=f"c{i}")
    wf.enqueue()
    connections[bench.alias].close()


def _claim_complete_loop(bench: Bench, n: int) -> float:
    """Seconds per row of the worker's claim + completion over ``n`` due rows."""
    params = {
        "all_queues": True,
        "queues": [],
        "lease": 30.0,
        "worker_id": "bench",
        "limit": BATCH,
        "floor": None,  # a full claim (sql/jobs.py, the scan floor)
    }
    done = 0
    elapsed = 0.0
    with bench.conn() as conn:
        while done < n:
            t0 = time.perf_counter()
            rows = conn.execute(sql.CLAIM_JOBS, params).fetchall()
            if not rows:
                break
            k = len(rows)
            conn.execute(
                sql.COMPLETE_JOBS,
                {
                    "ids": [r[0] for r in rows],
                    "tokens": [r[2] for r in rows],
                    "statuses": ["succeeded"] * k,
                    "results": ["null"] * k,
                    "delays": [0.0] * k,
                    "errors": [None] * k,
                    "last_errors": [None] * k,
                    "refunds": [0] * k,
                    "channel": f"bench-{uuid.uuid4().hex[:6]}",
                },
            )
            elapsed += time.perf_counter() - t0
            done += k
    return elapsed / max(done, 1)


def bench_workflows(bench: Bench) -> None:
    n = min(bench.n_drain, 10_000)
    concurrency = max(bench.drain_concurrency)
    plain = bench.add(Row("workflows", "plain jobs (reference)", "jobs/s", extra={"n": n}))
    chains = bench.add(
        Row(
            "workflows",
            f"chains of {CHAIN_LENGTH}",
            "steps/s",
            reference="plain jobs (reference)",
            extra={"n": n},
        )
    )
    fan = bench.add(
        Row(
            "workflows",
            f"fan-out {n:,} and fan-in",
            "steps/s",
            reference="plain jobs (reference)",
            extra={"n": n + 2},
        )
    )
    release_plain: list[float] = []
    release_steps: list[float] = []
    for rep in range(bench.repeat):
        plain.values.append(bench.worker_drain(n, concurrency)["steady"])
        chains.values.append(
            bench.worker_drain(n, concurrency, load=lambda k: _chains(bench, k))["steady"]
        )
        fan.values.append(
            bench.worker_drain(n + 2, concurrency, load=lambda k: _fan(bench, k - 2))["steady"]
        )
        bench.reset()
        bench.preload(n)
        bench.checkpoint(vacuum=True)
        release_plain.append(_claim_complete_loop(bench, n))
        bench.reset()
        _pairs(bench, n // 2)
        bench.checkpoint(vacuum=True)
        release_steps.append(_claim_complete_loop(bench, n // 2))
        bench.out(
            f"   rep {rep + 1}: plain {plain.values[-1]:,.0f}/s, chains {chains.values[-1]:,.0f}/s,"
            f" fan {fan.values[-1]:,.0f}/s, claim+complete {release_plain[-1] * 1e6:.0f} us/job,"
            f" with a release {release_steps[-1] * 1e6:.0f} us/step"
        )
    chains.ref_values = fan.ref_values = plain.values
    bench.add(
        Row(
            "workflows",
            "a release (claim + complete of a step that releases one child)",
            "us/step",
            values=[v * 1e6 for v in release_steps],
            reference="the same for a plain job",
            ref_values=[v * 1e6 for v in release_plain],
            better="lower",
            extra={
                "extra_us": statistics.median(release_steps) * 1e6
                - statistics.median(release_plain) * 1e6
            },
        )
    )
