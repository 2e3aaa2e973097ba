"""The benchmark server's URLconf: the HTTP API, and beside it the ceiling it is
measured against. Used only by ``bench/wsgi.py``, never mounted by a project."""

from __future__ import annotations

from django.urls import include, path

from .views import ceiling_event

urlpatterns = [
    path("api/", include("django_pgqueue.api.urls")),
    path("ceiling/events", ceiling_event),
]
