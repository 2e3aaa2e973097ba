"""Changelist filters that read the status partial indexes, not whole tables."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from ..models.queue import Status

STUCK = "stuck"


class StatusFilter(admin.SimpleListFilter):
    """Status, plus "stuck": held rows whose lease lapsed (their worker is gone).

    ``?status=dead`` is the dead-letter queue.
    """

    title = _("status")
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return [
            *Status.choices,
            (STUCK, _("Stuck (lease expired)")),
        ]

    def queryset(self, request, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if value == STUCK:
            return queryset.filter(Q(status=Status.IN_PROGRESS) & Q(locked_until__lt=Now()))
        if value in Status.values:
            return queryset.filter(status=value)
        return queryset


class RecentValuesFilter(admin.AllValuesFieldListFilter):
    """Choices from the newest rows only, so rendering the filter stays cheap.

    Django's own filter runs ``SELECT DISTINCT`` over the whole table on every
    changelist page. This one looks at the newest :attr:`sample` rows (read
    through the primary key index); any other value still filters by URL
    (``?queue_name=reports``).
    """

    sample = 10_000

    def __init__(self, field, request, params, model, model_admin, field_path):
        super().__init__(field, request, params, model, model_admin, field_path)
        recent = model._default_manager.order_by("-pk").values("pk")[: self.sample]
        # Reassigned before the lazy queryset built by the parent is ever run.
        self.lookup_choices = (
            model._default_manager.filter(pk__in=recent)
            .order_by(field_path)
            .values_list(field_path, flat=True)
            .distinct()
        )
