"""Per-row and detail-page buttons with django-admin-actions, made safe.

django-admin-actions (0.1.1) registers one admin URL per method named in
``actions_row`` / ``actions_detail`` and renders a plain link to it. We keep its
URL registration and its ``actions_row`` / ``actions_detail`` conventions and
adapt the rest in this subclass (docs/admin.md, "django-admin-actions"):

* Its buttons are GET links and its views are whatever the method does. Our
  methods (see :func:`row_action`) only render a confirmation page on GET; the
  change happens on POST, which the admin's ``csrf_protect`` guards.
* It checks no permission. Each button names one ``has_<name>_permission``
  method: without it the column and buttons are hidden and the URL answers 403.
* Its URL names are the method names alone (``admin:<method>``), shared by every
  admin of the site, so our methods carry the model in their names
  (``pgqueue_job_replay``).
* Its templates only load when ``admin_actions`` is in INSTALLED_APPS, where
  they also replace Django's object-tools templates for every admin of the
  project; its stylesheet is then a static file of that app. We render our own
  templates and stylesheet, so the package needs no INSTALLED_APPS entry.
* ``get_list_display`` concatenates a tuple to the admin's ``list_display``,
  which fails when that is a list; we normalise it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from admin_actions.admin import ActionsModelAdmin  # type: ignore[import-untyped]  # no py.typed
from django import forms
from django.contrib.admin import ModelAdmin, helpers
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext_lazy as _

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise


def row_action(
    label: StrOrPromise,
    url_path: str,
    *,
    permission: str,
    applies: Callable[[Any], bool] = lambda obj: True,
    style: str = "",
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Declare a row/detail button: ``label``, URL path, permission, when it applies.

    The decorated method is the view, ``(self, request, pk) -> HttpResponse``; it
    must render a confirmation on GET and act only on POST.
    """

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        def guarded(self: RowActionsAdmin, request: HttpRequest, pk: int) -> HttpResponse:
            self.check_row_action_permission(request, permission)
            return view(self, request, pk)

        guarded.__name__ = view.__name__
        guarded.__doc__ = view.__doc__
        guarded.short_description = label  # type: ignore[attr-defined]
        guarded.url_path = url_path  # type: ignore[attr-defined]
        guarded.permission = permission  # type: ignore[attr-defined]
        guarded.applies = applies  # type: ignore[attr-defined]
        guarded.style = style  # type: ignore[attr-defined]
        return guarded

    return decorate


class RowActionsAdmin(ActionsModelAdmin):
    """``ActionsModelAdmin`` with permission-aware, state-aware, POST-only buttons."""

    #: ``has_<name>_permission`` guarding this admin's own bulk actions (``actions``).
    action_permission = ""
    row_actions_template = "admin/django_pgqueue/row_actions.html"
    confirm_template = "admin/django_pgqueue/confirm_operation.html"
    change_form_template = "admin/django_pgqueue/change_form.html"

    class Media:
        # Replaces the package's stylesheet, a static file of its (uninstalled) app.
        extend = False
        css = {"all": ("django_pgqueue/admin.css",)}

    def check_row_action_permission(self, request: HttpRequest, permission: str) -> None:
        if not getattr(self, f"has_{permission}_permission")(request):
            raise PermissionDenied

    def _permitted(self, request: HttpRequest, names: tuple[str, ...]) -> list[str]:
        return [
            name
            for name in names
            if getattr(self, f"has_{getattr(self, name).permission}_permission")(request)
        ]

    def _buttons(self, names: list[str], obj: models.Model) -> list[dict[str, Any]]:
        buttons = []
        for name in names:
            method = getattr(self, name)
            if method.applies(obj):
                buttons.append(
                    {
                        "title": method.short_description,
                        "path": reverse(f"{self.admin_site.name}:{name}", args=(obj.pk,)),
                        "style": method.style,
                    }
                )
        return buttons

    def get_list_display(
        self, request: HttpRequest
    ) -> tuple[str | Callable[[Any], str | bool], ...]:
        display: tuple[str | Callable[[Any], str | bool], ...] = tuple(
            ModelAdmin.get_list_display(self, request)
        )
        # The column is rendered per row without the request, so permission is
        # decided here, for the whole column: the row buttons of one admin share
        # one permission.
        if self._permitted(request, tuple(self.actions_row)):
            display += ("actions_holder",)
        return display

    def actions_holder(self, instance: models.Model) -> str:
        return render_to_string(
            self.row_actions_template,
            {"actions_row": self._buttons(list(self.actions_row), instance)},
        )

    actions_holder.short_description = _("Actions")  # type: ignore[attr-defined]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        # Skip the package's change_view: it lists every button, unfiltered and
        # without the object; render_change_form below has both.
        return ModelAdmin.change_view(self, request, object_id, form_url, extra_context)

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        names = self._permitted(request, tuple(self.actions_detail))
        context["pgqueue_detail_actions"] = self._buttons(names, obj) if obj is not None else []
        return super().render_change_form(request, context, add, change, form_url, obj)

    # ----- the confirm-then-act view every button uses ------------------------

    def _next_url(self, request: HttpRequest) -> str:
        """Where to go after the POST: a local ``next`` (or the referring page)."""
        for url in (
            request.POST.get("next"),
            request.GET.get("next"),
            request.META.get("HTTP_REFERER") if request.method == "GET" else None,
        ):
            if url and url_has_allowed_host_and_scheme(
                url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
            ):
                return url
        opts = self.model._meta
        return reverse(f"{self.admin_site.name}:{opts.app_label}_{opts.model_name}_changelist")

    def confirmed_row_view(
        self,
        request: HttpRequest,
        pk: int,
        *,
        label: StrOrPromise,
        explanation: StrOrPromise,
        act: Callable[[Any, dict[str, Any]], HttpResponse | None],
        applies: Callable[[Any], bool] = lambda obj: True,
        form_class: type[forms.Form] | None = None,
    ) -> HttpResponse:
        """GET: a confirmation page (with ``form_class``'s fields). POST: ``act(obj, data)``
        (``data``: the form's cleaned data).

        ``act`` returns a response or None (then: redirect to ``next``). The
        permission was checked by :func:`row_action`; CSRF by the admin view.
        """
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        obj = get_object_or_404(self.get_queryset(request), pk=pk)
        next_url = self._next_url(request)
        form = None
        if form_class is not None:
            form = form_class(request.POST if request.method == "POST" else None)
        if request.method == "POST" and (form is None or form.is_valid()):
            data = form.cleaned_data if form is not None else {}
            return act(obj, data) or HttpResponseRedirect(next_url)
        context = {
            **self.admin_site.each_context(request),
            "title": label,
            "opts": self.model._meta,
            "operation": {"label": label, "explanation": explanation},
            "object": obj,
            "applies": applies(obj),
            "form": form,
            "next": next_url,
            "bulk": False,
        }
        return TemplateResponse(request, self.confirm_template, context)

    # ----- bulk actions: confirmation page and forged-POST guard -----------------

    def changelist_view(self, request: HttpRequest, extra_context=None):
        # Django drops an action the user may not run and redirects with a
        # message; a forged POST of one of ours is answered 403 instead.
        ours = request.method == "POST" and set(request.POST.getlist("action")) & set(
            self.actions or ()
        )
        permitted = getattr(self, f"has_{self.action_permission}_permission", None)
        if ours and permitted is not None and not permitted(request):
            raise PermissionDenied
        return super().changelist_view(request, extra_context)

    def confirm_bulk(
        self,
        request: HttpRequest,
        queryset: QuerySet,
        action_name: str,
        *,
        label: StrOrPromise,
        explanation: StrOrPromise,
        apply: Callable[[list[int]], Any],
        **extra: Any,
    ) -> HttpResponse | None:
        """First POST: a confirmation page. Confirmed POST (``post=yes``): ``apply(ids)``."""
        ids = list(queryset.values_list("pk", flat=True))
        if request.POST.get("post") == "yes":
            apply(ids)
            return None  # back to the changelist
        context = {
            **self.admin_site.each_context(request),
            "title": label,
            "opts": self.model._meta,
            "operation": {"label": label, "explanation": explanation},
            "action_name": action_name,
            "selected_ids": ids,
            "will_change": None,
            "will_skip": {},
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "bulk": True,
            **extra,
        }
        return TemplateResponse(request, self.confirm_template, context)
