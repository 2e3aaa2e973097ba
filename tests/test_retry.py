"""The retry policy is a pure function: properties hold for every attempt."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_pgqueue.retry import exponential_delay, jittered_schedule


@given(
    attempt=st.integers(1, 200),
    base=st.floats(0.01, 100),
    cap=st.floats(0.01, 10_000),
    r=st.floats(0, 0.999999),
)
def test_exponential_delay_is_positive_capped_and_within_jitter(attempt, base, cap, r):
    delay = exponential_delay(attempt, base=base, cap=cap, rand=lambda: r)
    ceiling = min(cap, base * 2.0 ** (attempt - 1))
    assert 0 < delay <= max(ceiling, 0.001)


def test_exponential_delay_full_jitter_bounds():
    assert exponential_delay(3, base=2, cap=100, rand=lambda: 0.0) == 8
    assert exponential_delay(3, base=2, cap=100, rand=lambda: 0.5) == 4
    assert exponential_delay(30, base=2, cap=100, rand=lambda: 0.0) == 100
    with pytest.raises(ValueError, match="attempt"):
        exponential_delay(0)


@given(attempt=st.integers(1, 12), r=st.floats(0, 1))
def test_schedule_with_jitter(attempt, r):
    schedule = [0, 5, 300, 1800, 7200, 18000, 36000, 36000]
    delay = jittered_schedule(attempt, schedule, jitter=0.2, rand=lambda: r)
    if attempt > len(schedule):
        assert delay is None
    else:
        base = schedule[attempt - 1]
        assert base * 0.8 - 1e-9 <= delay <= base * 1.2 + 1e-9
