"""Job rows are decoded by column name, from the list the statements are built from."""

from __future__ import annotations

import dataclasses

import pytest

from django_pgqueue import sql
from django_pgqueue.jobs.rows import CLAIMED_JOB, JOB_ROW, ClaimedJob, JobRow, RowDecoder


@dataclasses.dataclass
class Pair:
    left: int
    right: str


def test_a_row_is_decoded_by_name_whatever_the_column_order():
    decoder = RowDecoder(Pair, ["right", "left"])
    assert decoder.one(("r", 1)) == Pair(1, "r")
    assert decoder.all([("a", 1), ("b", 2)]) == [Pair(1, "a"), Pair(2, "b")]
    assert RowDecoder(Pair, ["left", "right"]).all([(1, "a")]) == [Pair(1, "a")]


def test_a_column_without_a_field_or_a_field_without_a_column_is_refused():
    with pytest.raises(TypeError, match=r"fields without a column \['right'\]"):
        RowDecoder(Pair, ["left"])
    with pytest.raises(TypeError, match=r"columns without a field \['extra'\]"):
        RowDecoder(Pair, ["left", "right", "extra"])


def test_the_statements_select_the_declared_columns():
    for _, expression in sql.CLAIMED_JOB_COLUMNS:
        assert expression in sql.CLAIM_JOBS and expression in sql.CLAIM_ATOMIC_JOB
    assert CLAIMED_JOB.cls is ClaimedJob and JOB_ROW.cls is JobRow
    assert "SELECT " + ", ".join(sql.JOB_ROW_COLUMNS) in sql.GET_JOB
