"""The customer portal's URLconf: ``include("django_pgqueue.portal.urls")``.

Every id in these URLs is looked up within the current application only: another
application's id is a 404, as is an id that does not exist.
"""

from django.urls import path

from . import views

app_name = "pgqueue_portal"

urlpatterns = [
    path("", views.endpoint_list, name="endpoint_list"),
    path("endpoints/new/", views.endpoint_create, name="endpoint_create"),
    path("endpoints/<int:pk>/", views.endpoint_detail, name="endpoint_detail"),
    path("endpoints/<int:pk>/edit/", views.endpoint_edit, name="endpoint_edit"),
    path("endpoints/<int:pk>/disable/", views.endpoint_disable, name="endpoint_disable"),
    path("endpoints/<int:pk>/enable/", views.endpoint_enable, name="endpoint_enable"),
    path("endpoints/<int:pk>/secret/", views.secret_reveal, name="secret_reveal"),
    path("endpoints/<int:pk>/rotate/", views.secret_rotate, name="secret_rotate"),
    path("endpoints/<int:pk>/test/", views.send_test, name="send_test"),
    path("deliveries/<int:pk>/", views.delivery_detail, name="delivery_detail"),
    path("deliveries/<int:pk>/replay/", views.delivery_replay, name="delivery_replay"),
    path("event-types/", views.event_types, name="event_types"),
]
