"""Columns and state lists are declared once: rows are decoded by column name from the
list the statements are built from, and SQL state lists come from states.py."""

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
        assert expression in sql.CLAIM_JOBS and expression in sql.CLAIM_ATOMIC_JOBS
    assert CLAIMED_JOB.cls is ClaimedJob and JOB_ROW.cls is JobRow
    assert "SELECT " + ", ".join(sql.JOB_ROW_COLUMNS) in sql.GET_JOB


def test_state_lists_in_sql_come_from_their_one_declaration():
    """``status IN ('pending', 'failed')`` is written once (states.CLAIMABLE, which the
    partial indexes use too) and formatted into every statement from there."""
    import re
    from pathlib import Path

    import django_pgqueue.sql

    # Every module, not only sql/: the triggers in models/ and the workers' statements
    # are SQL too. Migrations are history, written out as they were applied.
    package = Path(django_pgqueue.sql.__file__).parent.parent
    spelled = [
        f"{path.relative_to(package)}:{number}: {line.strip()}"
        for path in sorted(package.rglob("*.py"))
        if "migrations" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"IN \('(pending|failed|in_progress|succeeded|dead|cancelled)'", line)
    ]
    assert not spelled, "\n".join(spelled)
    assert sql.CLAIMABLE_SQL == "('pending', 'failed')"
    assert f"status IN {sql.CLAIMABLE_SQL} AND next_attempt_at <= now()" in sql.CLAIM_JOBS
