from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    # The customer portal (docs/multi-tenant.md); PORTAL_APPLICATION is in settings.py.
    # The HTTP API (docs/http-api.md): before the portal, whose prefix it shares.
    path("webhooks/api/", include("django_pgqueue.api.urls")),
    path("webhooks/", include("django_pgqueue.portal.urls")),
]
