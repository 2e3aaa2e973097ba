"""Units of the input contract and of the outcome sanitiser (no database)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_pgqueue.contract import check_json_document, format_path, json_depth
from django_pgqueue.exceptions import ArgumentsNotJSON
from django_pgqueue.storable import (
    HEADER_CAP,
    storable_headers,
    storable_json_text,
    storable_text,
)

_HOSTILE_TEXT = st.lists(
    st.one_of(st.characters(), st.sampled_from(["\x00", "\ud800", "\udfff", "\\u0000"])),
    max_size=10,
).map("".join)
_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), _HOSTILE_TEXT),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_HOSTILE_TEXT, inner, max_size=3),
    max_leaves=12,
)


def _clean(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *_strings(v))]
    return []


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        ("plain", "plain"),
        ("a\x00b", "a\\x00b"),
        ("a\udc80b", "a\\udc80b"),
        ("☃\x00\ud800", "☃\\x00\\ud800"),
    ],
)
def test_storable_text_escapes_visibly(text, stored):
    assert storable_text(text) == stored


def test_storable_text_caps_and_says_so():
    assert storable_text("x" * 30, 10) == "x" * 10 + "... [20 more characters not stored]"


@given(_VALUES)
def test_storable_json_text_is_always_jsonb_safe(value):
    for ensure_ascii in (True, False):
        text = storable_json_text(json.dumps(value, ensure_ascii=ensure_ascii))
        assert _clean(text)
        assert all(_clean(s) for s in _strings(json.loads(text)))


def test_storable_json_text_keeps_clean_text_as_is():
    text = json.dumps({"a": ["b", 1, "☃", "😀"]}, ensure_ascii=False)
    assert storable_json_text(text) is text


@given(
    st.dictionaries(
        _HOSTILE_TEXT,
        st.one_of(_HOSTILE_TEXT, st.just("v" * (HEADER_CAP + 5))),
        max_size=6,
    )
)
def test_storable_headers_escapes_and_caps_each_name_and_value(headers):
    text = storable_headers(headers)
    assert _clean(text)
    assert all(_clean(s) for s in _strings(json.loads(text)))
    if any("\ud800" <= c <= "\udfff" for item in headers.items() for c in "".join(item)):
        return  # two lone surrogates in a row may be read back as the pair they make
    assert json.loads(text) == {
        storable_text(k, HEADER_CAP): storable_text(v, HEADER_CAP) for k, v in headers.items()
    }


def test_storable_headers():
    assert json.loads(storable_headers({"X-Evil": "a\x00b", "X-Ok": "v"})) == {
        "X-Evil": "a\\x00b",
        "X-Ok": "v",
    }


@pytest.mark.parametrize(
    ("text", "depth"),
    [("1", 0), ('"[[["', 0), ("[]", 1), ('{"a":[1,{"b":"]]"}]}', 3), ('[[],[[]],"\\"["]', 3)],
)
def test_json_depth(text, depth):
    assert json_depth(text) == depth


def test_long_paths_are_shortened():
    path = format_path("args", tuple(range(40)))
    assert path.startswith("args[0][1]") and "[...30 more...]" in path and path.endswith("[39]")


@given(_VALUES, st.integers(min_value=1, max_value=6))
def test_contract_accepts_exactly_what_round_trips(value, max_depth):
    try:
        text = check_json_document(value, name="payload", max_bytes=10**6, max_depth=max_depth)
    except ArgumentsNotJSON as exc:
        assert "payload" in str(exc)
        return
    assert _clean(text) and json.loads(text) == value and json_depth(text) <= max_depth
