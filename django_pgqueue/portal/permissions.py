"""The portal's default permission function.

Kept apart from ``portal/views.py`` so that resolving the default
``PORTAL_PERMISSION`` (the system checks do it on every ``manage.py`` command)
imports nothing from ``django.contrib.auth``: a project that only runs workers
need not install it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django.http import HttpRequest

    from ..models.webhooks import Application


def default_permission(request: HttpRequest, application: Application, action: str) -> bool:
    """The default ``PORTAL_PERMISSION``: any logged-in user the project's
    ``PORTAL_APPLICATION`` gave an application to."""
    return bool(request.user.is_authenticated)
