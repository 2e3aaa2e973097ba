"""The HTTP API's URLconf: ``path("webhooks/api/", include("django_pgqueue.api.urls"))``.

Each route names the scope each of its methods needs (``http.route``); an id of an
object outside the key's application is a 404, as an id that does not exist. Ids
are taken as strings and parsed by the views, so a malformed one is a problem+json
404 like any other, not Django's HTML page.
"""

from django.urls import path, re_path
from django.views.decorators.http import require_GET

from ..operations import DELIVERY_OPERATIONS, ENDPOINT_OPERATIONS, JOB_READ, QUEUE_OPERATIONS
from . import applications, deliveries, endpoints, event_types, events, jobs, queues
from .http import no_such_route, route
from .openapi import openapi_view

app_name = "pgqueue_api"

SEND, READ, MANAGE = "send", "read", "manage"
#: The operations' own declarations: the route needs each one's scope, and the view
#: authorises the operation on its object (authority.authorize).
ENDPOINT, REPLAY = ENDPOINT_OPERATIONS, DELIVERY_OPERATIONS["replay"]
QUEUE = QUEUE_OPERATIONS

urlpatterns = [
    path("openapi.json", require_GET(openapi_view), name="openapi"),
    path("events", route(POST=(SEND, events.create_event)), name="events"),
    path("events/batch", route(POST=(SEND, events.create_events)), name="events_batch"),
    path(
        "endpoints",
        route(GET=(READ, endpoints.list_endpoints), POST=(MANAGE, endpoints.create_endpoint)),
        name="endpoints",
    ),
    path(
        "endpoints/<str:pk>",
        route(
            GET=(READ, endpoints.get_endpoint),
            PATCH=(MANAGE, endpoints.update_endpoint),
            DELETE=(MANAGE, endpoints.delete_endpoint),
        ),
        name="endpoint",
    ),
    path(
        "endpoints/<str:pk>/rotate-secret",
        route(POST=(ENDPOINT["rotate_secret"], endpoints.rotate_secret)),
        name="endpoint_rotate_secret",
    ),
    path(
        "endpoints/<str:pk>/enable",
        route(POST=(ENDPOINT["enable"], endpoints.enable_endpoint)),
        name="endpoint_enable",
    ),
    path(
        "endpoints/<str:pk>/disable",
        route(POST=(ENDPOINT["disable"], endpoints.disable_endpoint)),
        name="endpoint_disable",
    ),
    path(
        "endpoints/<str:pk>/test",
        route(POST=(ENDPOINT["send_test_event"], endpoints.send_test)),
        name="endpoint_test",
    ),
    path(
        "endpoints/<str:pk>/replay",
        route(POST=(ENDPOINT["replay_failed"], endpoints.replay_since)),
        name="endpoint_replay",
    ),
    path("deliveries", route(GET=(READ, deliveries.list_deliveries)), name="deliveries"),
    path(
        "deliveries/replay",
        route(POST=(REPLAY, deliveries.replay_deliveries)),
        name="deliveries_replay",
    ),
    path("deliveries/<str:pk>", route(GET=(READ, deliveries.get_delivery)), name="delivery"),
    path(
        "deliveries/<str:pk>/replay",
        route(POST=(REPLAY, deliveries.replay_delivery)),
        name="delivery_replay",
    ),
    path("event-types", route(GET=(READ, event_types.list_event_types)), name="event_types"),
    path(
        "applications",
        route(
            GET=(READ, applications.list_applications),
            POST=(MANAGE, applications.create_application),
        ),
        name="applications",
    ),
    path(
        "applications/<path:uid>",
        route(
            GET=(READ, applications.get_application),
            PATCH=(MANAGE, applications.update_application),
            DELETE=(MANAGE, applications.delete_application),
        ),
        name="application",
    ),
    path("queues", route(GET=(QUEUE["view"], queues.list_queues)), name="queues"),
    path(
        "queues/<str:name>",
        route(
            GET=(QUEUE["view"], queues.get_queue), PUT=(QUEUE["configure"], queues.configure_queue)
        ),
        name="queue",
    ),
    path(
        "queues/<str:name>/reset",
        route(POST=(QUEUE["reset"], queues.reset_queue)),
        name="queue_reset",
    ),
    path(
        "queues/<str:name>/pause",
        route(POST=(QUEUE["pause"], queues.pause_queue)),
        name="queue_pause",
    ),
    path(
        "queues/<str:name>/resume",
        route(POST=(QUEUE["resume"], queues.resume_queue)),
        name="queue_resume",
    ),
    path("jobs/<str:pk>", route(GET=(JOB_READ, jobs.get_job)), name="job"),
    # Last: any other URL under the API is a problem+json 404, not Django's HTML page.
    re_path(r"^(?P<rest>.*)$", no_such_route, name="no_such_route"),
]
