"""The HTTP API: events in (commit-then-2xx), endpoints, deliveries, applications.

Mounted by the project with ``path("webhooks/api/", include("django_pgqueue.api.urls"))``
(docs/http-api.md). Plain Django views: the package adds no dependency.
"""
