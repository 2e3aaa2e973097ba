"""Applications: one per customer of a multi-tenant project (docs/multi-tenant.md)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Count
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.translation import gettext_lazy as _

from ..models.webhooks import Application
from ..webhooks import store
from .display import WhenDatesMixin


@admin.register(Application)
class ApplicationAdmin(WhenDatesMixin, admin.ModelAdmin):
    list_display = ("uid", "name", "is_active", "endpoints", "created_at")
    list_filter = ("is_active",)
    search_fields = ("=uid", "name")
    ordering = ("uid",)
    show_full_result_count = False
    fields = ("uid", "name", "metadata", "is_active")

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(endpoint_count=Count("endpoints"))

    # Its webhook rows go with it, explicitly, through the webhook store.
    def get_deleted_objects(self, objs: Any, request: Any) -> Any:
        # The store deletes the deliveries with it: their read-only admin must not
        # forbid it.
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        return deleted, counts, store.deletion_permissions_needed(perms_needed), protected

    def delete_model(self, request: Any, obj: Application) -> None:
        store.delete_applications([obj.pk])

    def delete_queryset(self, request: Any, queryset: Any) -> None:
        store.delete_applications(queryset.values_list("pk", flat=True))

    @admin.display(description=_("endpoints"), ordering="endpoint_count")
    def endpoints(self, obj: Any) -> str:
        url = reverse(f"{self.admin_site.name}:django_pgqueue_endpoint_changelist")
        query = urlencode({"application": obj.uid})
        return format_html('<a href="{}?{}">{}</a>', url, query, obj.endpoint_count)
