"""Conditions of the queue tables' CHECK constraints, in the shape PostgreSQL
checks cheapest.

PostgreSQL (15 to 17) reads each CHECK constraint of a table back from its stored
text and prepares it again at every statement that writes a row (``ExecRelCheck``:
``stringToNode`` then ``expression_planner``), and a prepared statement is no
exception. For a one-row ``INSERT`` or ``UPDATE`` that is most of the statement's
own work: the eight CHECKs of ``pgqueue_job`` were 247,000 of a one-job enqueue's
555,000 backend instructions (``valgrind --tool=callgrind``, docs/performance.md,
"CHECK constraints on the one-row paths"). So each condition here is written with
as few nodes as the rule needs; the rules themselves are unchanged.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

from django.db.models import BooleanField, F, Func, Value
from django.utils.deconstruct import deconstructible


class _Condition(Func):
    """A boolean condition written out as ``shape``: a ``str.format`` template whose
    ``{0}``, ``{1}``... are the source expressions, each compiled once and placed
    in parentheses (a column, or a parameter that a constraint's DDL inlines)."""

    output_field = BooleanField()
    shape = ""

    def as_sql(
        self,
        compiler: Any,
        connection: Any,
        function: str | None = None,
        template: str | None = None,
        arg_joiner: str | None = None,
        **extra_context: Any,
    ) -> tuple[str, tuple[Any, ...]]:
        parts = [compiler.compile(e) for e in self.get_source_expressions()]
        order = [int(f) for _, f, _, _ in string.Formatter().parse(self.shape) if f]
        sql = self.shape.format(*(f"({part_sql})" for part_sql, _ in parts))
        return sql, tuple(p for i in order for p in parts[i][1])


@deconstructible(path="django_pgqueue.models.expressions.OneOf")
class OneOf(_Condition):
    """``field`` holds one of ``values``: ``(field)::text = ANY(('{a,b}')::text[])``.

    ``Q(field__in=values)`` is stored as an array built from one constant per value,
    each cast, and that array is built again at every statement: 77,500
    instructions for the seven states of a queue row, against 38,000 for one array
    constant.
    """

    shape = "{0}::text = ANY({1}::text[])"

    def __init__(self, field: str, values: Sequence[str]) -> None:
        for value in values:
            if not value or any(c in value for c in '{},"\\ '):
                raise ValueError(f"OneOf: {value!r} cannot be an element of an array literal")
        super().__init__(F(field), Value("{" + ",".join(values) + "}"))


@deconstructible(path="django_pgqueue.models.expressions.LeaseIffRunning")
class LeaseIffRunning(_Condition):
    """A row in state ``running`` has a lease and a claim token; any other has no
    lease: ``CASE WHEN status = running THEN locked_by IS NOT NULL AND locked_until
    IS NOT NULL ELSE locked_until IS NULL END``.

    One test of the state where the ``OR`` of two ``AND``s had two: 40,000
    instructions a statement against 61,000. Written out here rather than as a
    ``Case`` of ``Q`` objects, which Django folds wrongly when it validates a model
    whose lease columns are None (the ``WHEN`` is dropped, so the ``ELSE`` answers).
    """

    shape = (
        "CASE WHEN {0}::text = {3}::text THEN {1} IS NOT NULL AND {2} IS NOT NULL"
        " ELSE {2} IS NULL END"
    )

    def __init__(self, running: str) -> None:
        super().__init__(F("status"), F("locked_by"), F("locked_until"), Value(running))
