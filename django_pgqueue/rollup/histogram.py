"""Fixed logarithmic buckets for durations, and percentiles read from their counts.

A rollup minute stores how many waits (due to start) and run times fell in each
bucket rather than the samples themselves: a few dozen integers per queue and
minute whatever the throughput, and minutes add up bucket by bucket, so the p95
of an hour is read from sixty rows. The price is precision: a percentile is
reported as the upper bound of its bucket (at most 2.5 times the true value,
never less than it), which is what a chart of "how slow" needs.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

#: Upper bounds of the buckets, in seconds (1-2.5-5 steps, then minutes and hours);
#: a last bucket holds everything slower. Never reorder: stored rows index into it.
BOUNDS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1000.0,
    3600.0,
)
#: Buckets per histogram (the BOUNDS and one for slower).
SIZE = len(BOUNDS) + 1


def bucket(seconds: float) -> int:
    """The bucket of a duration (negative ones, from a clock step, count as 0)."""
    return bisect.bisect_left(BOUNDS, max(0.0, seconds))


def add(counts: list[int], seconds: float) -> None:
    """Count one duration into ``counts`` (a list of SIZE integers)."""
    counts[bucket(seconds)] += 1


def merge(histograms: Iterable[Sequence[int] | None]) -> list[int]:
    """The bucket-wise sum of histograms (shorter or missing ones count as zeros)."""
    total = [0] * SIZE
    for histogram in histograms:
        for i, count in enumerate((histogram or ())[:SIZE]):
            total[i] += int(count)
    return total


def percentile(counts: Sequence[int], fraction: float) -> float | None:
    """The upper bound of the bucket holding the ``fraction`` quantile (None: no
    samples). The open last bucket reports its lower bound."""
    total = sum(counts)
    if total <= 0:
        return None
    rank = fraction * total
    seen = 0
    for i, count in enumerate(counts):
        seen += count
        if seen >= rank and count:
            return BOUNDS[i] if i < len(BOUNDS) else BOUNDS[-1]
    return BOUNDS[-1]  # pragma: no cover - the loop always reaches the rank


def literal(counts: Sequence[int]) -> str:
    """``counts`` as a PostgreSQL array literal (the upsert casts it to bigint[])."""
    return "{" + ",".join(map(str, counts)) + "}"
