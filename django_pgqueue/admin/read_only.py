"""Admins whose rows change only through their operations, never through a form."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest


class ReadOnlyAdminMixin:
    """No add, change or delete: the lists and detail pages only show.

    Queue rows and message queues change state through the operator operations
    (each with its own permission and audit), not by editing their columns.
    """

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
