"""The customer portal: pages a multi-tenant project mounts in its own site, where a
customer manages only their application's endpoints (docs/multi-tenant.md).

    path("webhooks/", include("django_pgqueue.portal.urls")),
"""
