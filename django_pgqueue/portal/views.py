"""The customer portal's views.

Tenant isolation is the point of every function here: the current application
comes from ``PGQUEUE["WEBHOOKS"]["PORTAL_APPLICATION"]`` (the project's function of
the request), and every object is fetched through it (``_endpoint``, ``_delivery``),
so an id of another application is a 404 exactly like an id that does not exist.
Changes are POSTs (with Django's CSRF protection); secrets are shown only in the
response to a POST, never cached.

Every change is an operation of ``operations.py``, authorised by
``authority.authorize`` for the customer (:func:`_authorized`, the same check as
the HTTP API's) and put on record by ``api.audit.record``: the admin's History shows
what the customer did, by their own user.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.module_loading import import_string
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from .. import authority, operations
from ..api import audit
from ..authority import Customer
from ..conf import get_settings
from ..models.webhooks import Application, Delivery, Endpoint
from ..operations import DELIVERY_OPERATIONS, ENDPOINT_OPERATIONS
from ..webhooks import store
from .forms import EndpointForm
from .permissions import default_permission  # noqa: F401 - its former home

#: Deliveries listed on an endpoint's page (newest first).
RECENT_DELIVERIES = 50

View = Callable[..., HttpResponse]


def current_application(request: HttpRequest) -> Application:
    """The application of this request, from the project's ``PORTAL_APPLICATION``
    function (an Application, an uid, or None for none: 404)."""
    conf = get_settings().WEBHOOKS
    path = conf["PORTAL_APPLICATION"]
    if path is None:
        raise ImproperlyConfigured(
            "The webhook portal is mounted but PGQUEUE['WEBHOOKS']['PORTAL_APPLICATION'] is "
            "not set: give the dotted path of a function of the request that returns the "
            "customer's Application (or its uid)."
        )
    found = import_string(path)(request)
    if isinstance(found, str):
        found = Application.objects.filter(uid=found).first()
    if not isinstance(found, Application) or not found.is_active:
        raise Http404(_("No webhook application for this account."))
    return found


def portal_view(action: str) -> Callable[[View], View]:
    """Resolve the application, ask the permission hook for ``action``, never cache."""

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                # Where every Django page sends a visitor who is not logged in.
                return redirect_to_login(request.get_full_path())
            application = current_application(request)
            allowed = import_string(get_settings().WEBHOOKS["PORTAL_PERMISSION"])
            if not allowed(request, application, action):
                raise PermissionDenied
            return view(request, application, *args, **kwargs)

        return never_cache(wrapper)

    return decorate


def _authorized(
    request: HttpRequest, application: Application, operation: Any, obj_application_id: Any
) -> Customer:
    """The customer, allowed to apply ``operation`` to an object of ``obj_application_id``
    (``authority.authorize``): 404 for another application's object, 403 otherwise."""
    customer = Customer(application, request.user)
    try:
        authority.authorize(customer, operation, obj_application_id)
    except authority.Refused as exc:
        if exc.hidden:
            raise Http404(_("Not found.")) from None
        raise PermissionDenied(str(exc)) from None
    return customer


def portal_operation(kind: str, name: str) -> Callable[[View], View]:
    """Mark a view as the portal's door to operation ``name`` of ``kind``'s declarations
    (what the authority tests enumerate)."""
    operation = (ENDPOINT_OPERATIONS if kind == "endpoint" else DELIVERY_OPERATIONS)[name]

    def mark(view: View) -> View:
        view.operation = operation  # type: ignore[attr-defined]
        return view

    return mark


def _endpoint(application: Application, pk: int) -> Endpoint:
    return get_object_or_404(Endpoint, pk=pk, application=application)


def _delivery(application: Application, pk: int) -> Delivery:
    return get_object_or_404(
        Delivery.objects.select_related("event", "endpoint"),
        pk=pk,
        endpoint__application=application,
    )


def _render(
    request: HttpRequest, template: str, application: Application, **context: Any
) -> TemplateResponse:
    return TemplateResponse(
        request,
        f"django_pgqueue/portal/{template}",
        {"application": application, **context},
    )


def _to_endpoint(endpoint: Endpoint) -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("pgqueue_portal:endpoint_detail", args=[endpoint.pk]))


@portal_view("view")
def endpoint_list(request: HttpRequest, application: Application) -> HttpResponse:
    endpoints = Endpoint.objects.filter(application=application).order_by("id")
    return _render(request, "endpoint_list.html", application, endpoints=endpoints)


def _save_form(
    request: HttpRequest, application: Application, endpoint: Endpoint
) -> tuple[HttpResponse | None, EndpointForm]:
    form = EndpointForm(request.POST or None, instance=endpoint)
    # The application is the portal's, set before validation and never a field.
    form.instance.application = application
    if request.method == "POST" and form.is_valid():
        # The configuration only (the store's): run-time state is never the form's.
        # ``is_valid`` built the instance from the form (no many-to-many fields).
        saved = store.save_endpoint(form.instance)
        messages.success(request, _("The endpoint was saved."))
        return _to_endpoint(saved), form
    return None, form


def _record_saved(
    request: HttpRequest, application: Application, form: EndpointForm, *, added: bool
) -> None:
    """Put the customer's save on record, as the API does for a key's."""
    audit.record(
        Customer(application, request.user),
        Endpoint,
        {form.instance.pk: "Added." if added else audit.change_message(form.changed_data)},
        action_flag=audit.ADDITION if added else audit.CHANGE,
    )


@portal_view("change")
def endpoint_create(request: HttpRequest, application: Application) -> HttpResponse:
    done, form = _save_form(request, application, Endpoint())
    if done:
        _record_saved(request, application, form, added=True)
    return done or _render(request, "endpoint_form.html", application, form=form)


@portal_view("change")
def endpoint_edit(request: HttpRequest, application: Application, pk: int) -> HttpResponse:
    endpoint = _endpoint(application, pk)
    done, form = _save_form(request, application, endpoint)
    if done:
        _record_saved(request, application, form, added=False)
    return done or _render(request, "endpoint_form.html", application, form=form, endpoint=endpoint)


@portal_view("view")
def endpoint_detail(request: HttpRequest, application: Application, pk: int) -> HttpResponse:
    endpoint = _endpoint(application, pk)
    deliveries = (
        Delivery.objects.filter(endpoint=endpoint)
        .select_related("event")
        .order_by("-id")[:RECENT_DELIVERIES]
    )
    return _render(
        request, "endpoint_detail.html", application, endpoint=endpoint, deliveries=deliveries
    )


#: ``disabled_reason`` of an endpoint the customer disabled in the portal.
DISABLED_IN_PORTAL = "Disabled by the customer in the webhook portal."


def _endpoint_operation(operation: str, done: str) -> View:
    op = ENDPOINT_OPERATIONS[operation]

    @portal_operation("endpoint", operation)
    @portal_view("change")
    @require_POST
    def view(request: HttpRequest, application: Application, pk: int) -> HttpResponse:
        endpoint = _endpoint(application, pk)
        customer = _authorized(request, application, op, endpoint.application_id)
        # The operator operation, with the portal's own reason: the admin and the
        # customer can tell who disabled it.
        reason = DISABLED_IN_PORTAL if operation == "disable" else None
        result = operations.apply_endpoint_operation(operation, [endpoint.pk], reason=reason)
        audit.record(customer, Endpoint, {pk: op.audit(was) for pk, was in result.changed.items()})
        messages.success(request, done)
        return _to_endpoint(endpoint)

    return view


endpoint_disable = _endpoint_operation("disable", "The endpoint is disabled: nothing is sent.")
endpoint_enable = _endpoint_operation(
    "enable", "The endpoint is enabled: waiting deliveries go out now."
)


@portal_operation("endpoint", "reveal_secret")
@portal_view("secret")
@require_POST
def secret_reveal(request: HttpRequest, application: Application, pk: int) -> HttpResponse:
    endpoint = _endpoint(application, pk)
    op = ENDPOINT_OPERATIONS["reveal_secret"]
    customer = _authorized(request, application, op, endpoint.application_id)
    audit.record(customer, Endpoint, {endpoint.pk: op.done})
    return _render(request, "secret.html", application, endpoint=endpoint, secret=endpoint.secret)


@portal_operation("endpoint", "rotate_secret")
@portal_view("secret")
@require_POST
def secret_rotate(request: HttpRequest, application: Application, pk: int) -> HttpResponse:
    endpoint = _endpoint(application, pk)
    op = ENDPOINT_OPERATIONS["rotate_secret"]
    customer = _authorized(request, application, op, endpoint.application_id)
    secret = operations.rotate_secret(endpoint)
    grace = get_settings().WEBHOOKS["SECRET_ROTATION_GRACE"]
    audit.record(customer, Endpoint, {endpoint.pk: audit.rotated(grace)})
    return _render(
        request,
        "secret.html",
        application,
        endpoint=endpoint,
        secret=secret,
        rotated=True,
        grace_hours=round(grace / 3600, 1),
    )


@portal_operation("endpoint", "send_test_event")
@portal_view("change")
@require_POST
def send_test(request: HttpRequest, application: Application, pk: int) -> HttpResponse:
    endpoint = _endpoint(application, pk)
    op = ENDPOINT_OPERATIONS["send_test_event"]
    customer = _authorized(request, application, op, endpoint.application_id)
    delivery = operations.send_test_event(endpoint)
    if delivery is None:
        messages.error(request, _("The endpoint is disabled: enable it to send a test event."))
        return _to_endpoint(endpoint)
    audit.record(customer, Endpoint, {endpoint.pk: audit.test_event_sent(delivery.pk)})
    messages.success(request, _("A test event is on its way."))
    return HttpResponseRedirect(reverse("pgqueue_portal:delivery_detail", args=[delivery.pk]))


@portal_view("view")
def delivery_detail(request: HttpRequest, application: Application, pk: int) -> HttpResponse:
    delivery = _delivery(application, pk)
    attempts = delivery.attempts_log.order_by("id")
    return _render(
        request, "delivery_detail.html", application, delivery=delivery, attempts=attempts
    )


@portal_operation("delivery", "replay")
@portal_view("change")
@require_POST
def delivery_replay(request: HttpRequest, application: Application, pk: int) -> HttpResponse:
    delivery = _delivery(application, pk)
    op = DELIVERY_OPERATIONS["replay"]
    customer = _authorized(request, application, op, delivery.endpoint.application_id)
    result = operations.replay(Delivery, [delivery.pk])
    audit.record(customer, Delivery, {pk: op.audit(was) for pk, was in result.changed.items()})
    if result.changed:
        messages.success(request, _("The delivery will be sent again."))
    else:
        messages.info(request, _("This delivery is already waiting or being sent."))
    return HttpResponseRedirect(reverse("pgqueue_portal:delivery_detail", args=[delivery.pk]))


@portal_view("view")
def event_types(request: HttpRequest, application: Application) -> HttpResponse:
    """The event type catalogue: what a customer may subscribe to, with its schema."""
    import json

    from ..webhooks.catalogue import catalogue

    types = [
        {
            "name": t.name,
            "description": t.description,
            "schema": json.dumps(t.schema, indent=2) if t.schema else "",
        }
        for t in sorted(catalogue().values(), key=lambda t: t.name)
    ]
    return _render(request, "event_types.html", application, event_types=types)
