"""The message-queue input contract under hostile input, through every door.

One table of hostile messages is thrown at ``mq.send`` (Python), at
``SELECT pgmq.send`` (SQL) and, for what PostgreSQL can hold, straight into the
queue's table (another program); then read back through ``mq.read``, a consumer
and the admin browser. Nothing raises out of a read, nothing answers 500, and the
innocent messages beside them are handled. A Hypothesis property does the same
for generated documents: each door either refuses with a clear error or stores a
message that reads back equal.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import DatabaseError, connection
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_pgqueue import mq
from django_pgqueue.mq.consumers import unregister

from ..admin.conftest import _staff, csrf_client
from .test_sql_api import one
from .test_untrusted_rows import plant

pytestmark = pytest.mark.django_db(transaction=True)


def _nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


#: (name, the Python value, the SQL expression of the same message or None when
#: PostgreSQL cannot even parse it, whether PostgreSQL can hold it in a table).
HOSTILE: list[tuple[str, Any, str]] = [
    ("deep nesting", _nested(3000), "(repeat('[', 3000) || repeat(']', 3000))::jsonb"),
    ("huge int", [10**5000], "('[' || repeat('7', 5000) || ']')::jsonb"),
    ("float overflow", [float("inf")], "('[' || repeat('9', 400) || '.5]')::jsonb"),
    ("NaN", [float("nan")], "'[NaN]'::jsonb"),
    ("Infinity", {"x": float("-inf")}, "'{\"x\": -Infinity}'::jsonb"),
    ("NUL", {"s": "a\x00b"}, '\'{"s": "a\\u0000b"}\'::jsonb'),
    ("lone surrogate", ["\ud800"], "'[\"\\ud800\"]'::jsonb"),
    ("bare string", "text", "'\"text\"'::jsonb"),
    ("bare number", 5, "'5'::jsonb"),
    ("bare bool", True, "'true'::jsonb"),
    ("json null", None, "'null'::jsonb"),
    ("oversize", ["x" * 1_100_000], "pg_catalog.jsonb_build_array(repeat('x', 1100000))"),
]
IDS = [row[0] for row in HOSTILE]


@pytest.mark.parametrize(("name", "value", "body"), HOSTILE, ids=IDS)
def test_both_doors_refuse_hostile_messages_with_a_clear_error(sql_api, name, value, body):
    mq.create("hostile")
    with pytest.raises(mq.InvalidMessage) as python_refusal:
        mq.send("hostile", value)
    assert "message" in str(python_refusal.value)
    with pytest.raises(mq.InvalidMessage):
        mq.send_batch("hostile", [{"ok": 1}, value])
    with pytest.raises(DatabaseError) as sql_refusal:
        one(f"SELECT * FROM pgmq_test.send('hostile', {body})")
    assert str(sql_refusal.value).strip()
    with pytest.raises(DatabaseError):
        one(f"SELECT * FROM pgmq_test.send_batch('hostile', ARRAY['{{}}'::jsonb, {body}])")
    assert mq.metrics("hostile").total_messages == 0
    assert connection.is_usable()


#: The hostile messages PostgreSQL can hold, written past both doors.
STORABLE = [body for _, _, body in HOSTILE if "NaN" not in body and "Infinity" not in body]
STORABLE = [body for body in STORABLE if "\\u0000" not in body and "\\ud800" not in body]

seen: list[Any] = []


@pytest.fixture
def consumer() -> Iterator[None]:
    seen.clear()

    @mq.consumer("planted", vt=5, batch=50)
    def handle(message: mq.Message) -> None:
        seen.append(message.message)

    yield
    unregister("planted")


def test_hostile_rows_never_stop_a_read_a_consumer_or_the_browser(consumer, run_worker):
    mq.create("planted", max_reads=2)
    innocents = []
    for body in STORABLE:
        innocents.append(mq.send("planted", {"n": len(innocents)}))
        plant("planted", body)
    innocents.append(mq.send("planted", {"n": len(innocents)}))

    viewer = csrf_client(_staff("hostile_viewer", "view_messagequeue"))
    page = viewer.get(reverse("admin:django_pgqueue_messagequeue_messages", args=["planted"]))
    assert page.status_code == 200
    assert page.content.decode().count("cannot be decoded") == 3

    worker = run_worker(burst=True, lease_seconds=5)
    handled = [m for m in seen if isinstance(m, dict) and "n" in m]
    assert sorted(m["n"] for m in handled) == list(range(len(innocents)))  # none lost
    assert worker.outcomes == {"succeeded": len(seen)}
    for scalar in ("text", 5, True, None):  # decoded on the worker's connection, once
        assert any(type(m) is type(scalar) and m == scalar for m in seen), scalar
    # The scalars and null Python can decode are handed over as they are; the three
    # it cannot are in the archive, each with its error.
    assert mq.metrics("planted").queue_length == 0
    assert mq.read("planted", qty=50) == []
    archive = viewer.get(
        reverse("admin:django_pgqueue_messagequeue_messages", args=["planted"]), {"archived": "1"}
    )
    assert archive.status_code == 200
    assert archive.content.decode().count("x-pgqueue-quarantine") == 3


# -- the property ----------------------------------------------------------------------

_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([4300, 6000]).map(lambda digits: 10**digits)  # beyond Python's str()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(st.characters(exclude_categories=()), max_size=8)
)
_documents = st.recursive(
    _leaves,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(st.characters(exclude_categories=()), max_size=4), children, max_size=4
        )
    ),
    max_leaves=12,
) | st.integers(min_value=95, max_value=105).map(_nested)


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON: jsonb keeps numbers as decimals, so 1e20 may come back as an int."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=0, abs_tol=0) or a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(document=_documents)
def test_each_door_refuses_clearly_or_reads_back_equal(sql_api, document):
    """One rule: the Python and the SQL door accept exactly the same documents (these
    are far below the size limit, where the doors measure slightly differently), and
    what either accepts reads back equal."""
    mq.create("prop")
    try:
        mq.send("prop", document)
    except mq.InvalidMessage:
        python_ok = False
    else:
        python_ok = True
        (message,) = mq.read("prop", qty=5)
        assert _same(message.message, document)
        mq.delete("prop", message.msg_id)
    try:
        text = json.dumps(document, allow_nan=True)
    except (ValueError, RecursionError):
        assert not python_ok
        return  # no JSON text to send at the SQL door
    try:
        one("SELECT * FROM pgmq_test.send('prop', %s::jsonb)", text)
    except DatabaseError:
        sql_ok = False
    else:
        sql_ok = True
        (message,) = mq.read("prop", qty=5)  # never raises, whatever was stored
        assert _same(message.message, document)
        mq.delete("prop", message.msg_id)
    assert sql_ok == python_ok, text[:200]
    assert mq.metrics("prop").queue_length == 0
