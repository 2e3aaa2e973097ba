"""Changelist counts that stay cheap on tables with millions of rows."""

from __future__ import annotations

import json

from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.utils.functional import cached_property

from ..stats import estimated_row_count


class EstimatedCountPaginator(Paginator):
    """A paginator whose total is the planner's estimate once it is large.

    ``COUNT(*)`` reads every matching row: on a queue table with years of history
    that is seconds per changelist page. Unfiltered lists use ``pg_class.reltuples``
    (one catalogue lookup); filtered lists use the planner's row estimate for the
    filtered query. Below :attr:`exact_below` rows the estimate is replaced by an
    exact count, so small numbers an operator acts on (the DLQ, stuck rows) are exact.
    """

    exact_below = 10_000

    @cached_property
    def count(self) -> int:
        qs = self.object_list
        if not isinstance(qs, QuerySet):
            return super().count
        # Filtered: the planner's estimate for the query; whole table: reltuples.
        estimate = self._planner_estimate(qs) if qs.query.where else estimated_row_count(qs.model)
        if estimate is not None and estimate >= self.exact_below:
            return estimate
        return super().count

    @staticmethod
    def _planner_estimate(qs: QuerySet) -> int | None:
        try:
            plan = json.loads(qs.order_by().explain(format="json"))
        except (ValueError, TypeError):
            return None
        return int(plan[0]["Plan"]["Plan Rows"])
