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


#: The lookup of global rows (no application) in ``?application=``.
GLOBAL = "-"


def application_filter(path: str) -> type[admin.SimpleListFilter]:
    """A filter by application uid (``?application=cust_42``; ``-`` for global rows)
    through the relation ``path`` (``application``, ``endpoint__application``).

    It lists the first :attr:`listed` applications by uid, so a project with 100,000
    customers renders it cheaply; any other uid still filters by URL.
    """

    class ApplicationFilter(admin.SimpleListFilter):
        title = _("application")
        parameter_name = "application"
        listed = 100

        def lookups(self, request, model_admin):
            from ..models.webhooks import Application

            uids = Application.objects.order_by("uid").values_list("uid", "name")
            return [
                (GLOBAL, _("Global (no application)")),
                *((uid, name or uid) for uid, name in uids[: self.listed]),
            ]

        def queryset(self, request, queryset: QuerySet) -> QuerySet:
            value = self.value()
            if value is None:
                return queryset
            if value == GLOBAL:
                return queryset.filter(**{f"{path}__isnull": True})
            return queryset.filter(**{f"{path}__uid": value})

    return ApplicationFilter


class EndpointFilter(admin.RelatedFieldListFilter):
    """The endpoint filter of the delivery list, each endpoint named as everywhere in
    the admin (``#id URL · application``): by URL alone, two customers' endpoints
    with one URL were two identical choices. One query, capped like the application
    filter; any other endpoint still filters by URL (``?endpoint__id__exact=``)."""

    listed = 100

    def field_choices(self, field, request, model_admin):
        from ..models.webhooks import Endpoint
        from .dashboard import endpoint_label

        rows = Endpoint.objects.order_by("pk").values_list("pk", "url", "application__uid")
        return [(pk, endpoint_label(pk, url, app)) for pk, url, app in rows[: self.listed]]
