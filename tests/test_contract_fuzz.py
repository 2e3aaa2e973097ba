"""The input contract under Hypothesis: every value is either accepted as JSON text that
PostgreSQL's ``jsonb`` stores and gives back equal, or refused with the project's own
error before any SQL. Never a ``DataError``, a ``UnicodeEncodeError``, a
``RecursionError`` or a ``TypeError`` from somewhere inside.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, event, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from django_pgqueue.contract import check_json_document
from django_pgqueue.exceptions import ArgumentsNotJSON, PayloadTooLarge

pytestmark = pytest.mark.django_db

MAX_BYTES = 4000
MAX_DEPTH = 6

# Text a user might paste: anything, plus NUL, both halves of a surrogate pair alone,
# a real pair, and the six characters "\u0000" that look like a NUL in JSON.
hostile_text = st.one_of(
    st.text(max_size=40),
    st.lists(
        st.sampled_from(["a", "\x00", "\ud800", "\udfff", "\ud83d\ude00", "\\", '"']),
        max_size=12,
    ).map("".join),
    st.sampled_from(["\\u0000", "\\ud800", "é" * 30, "x" * 5000]),
)
numbers = st.one_of(
    st.integers(),
    st.integers(min_value=10**300, max_value=10**310),
    # More digits than Python writes as text (built lazily: not even repr() can show it).
    st.integers(min_value=4300, max_value=5000).map(lambda digits: 10**digits),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([float("nan"), float("inf"), -0.0, 1e16, 2.0**53 + 1, 5e-324]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, hostile_text)
keys = st.one_of(hostile_text, st.integers(), st.none(), st.booleans(), st.floats())
not_json = st.one_of(st.binary(max_size=4), st.sets(st.integers(), max_size=2), st.just(object()))

values = st.recursive(
    st.one_of(scalars, not_json),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(keys, children, max_size=4),
    ),
    max_leaves=12,
)


def _deep(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def _roundtrip(text: str) -> Any:
    """Store ``text`` as jsonb and read it back, in a savepoint so a refusal by the
    database would surface as the test's failure, not poison the transaction."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT (%s::jsonb)::text", [text])
        return json.loads(cursor.fetchone()[0])


def _same(a: Any, b: Any) -> bool:
    """JSON equality (numbers by value: jsonb stores them as numeric)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b or (math.isfinite(a) and math.isfinite(b) and math.isclose(a, b))
    return bool(a == b)


@hyp_settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(value=st.one_of(values, st.integers(min_value=0, max_value=9).map(_deep)))
def test_the_contract_accepts_what_jsonb_stores_exactly_and_refuses_the_rest(value):
    try:
        text = check_json_document(value, name="args", max_bytes=MAX_BYTES, max_depth=MAX_DEPTH)
    except (ArgumentsNotJSON, PayloadTooLarge) as exc:
        event(f"refused: {type(exc).__name__}")
        message = str(exc)
        # The refusal names where, or how big: something the caller can act on.
        assert "args" in message or "bytes" in message, message
        return
    event("accepted")
    assert len(text.encode("utf-8")) <= MAX_BYTES
    stored = _roundtrip(text)
    assert _same(stored, json.loads(text)), (text, stored)


def test_a_nan_key_is_refused_naming_its_place():
    # Found by the property above: json.dumps refuses a NaN key like a NaN value, and the
    # refusal used to say only "cannot be stored as JSON".
    with pytest.raises(ArgumentsNotJSON, match=r"args\[0\]\['a'\] has the key nan"):
        check_json_document(
            [{"a": {float("nan"): 1}}], name="args", max_bytes=MAX_BYTES, max_depth=MAX_DEPTH
        )
