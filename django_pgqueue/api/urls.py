"""The HTTP API's URLconf: ``path("webhooks/api/", include("django_pgqueue.api.urls"))``.

Each route names the scope each of its methods needs (``http.route``); an id of an
object outside the key's application is a 404, as an id that does not exist.
"""

from django.urls import path
from django.views.decorators.http import require_GET

from . import events
from .http import route
from .openapi import openapi_view

app_name = "pgqueue_api"

urlpatterns = [
    path("openapi.json", require_GET(openapi_view), name="openapi"),
    path("events", route(POST=("send", events.create_event)), name="events"),
    path("events/batch", route(POST=("send", events.create_events)), name="events_batch"),
]
