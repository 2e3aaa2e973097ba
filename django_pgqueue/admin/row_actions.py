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
from typing import Any

from admin_actions.admin import ActionsModelAdmin
from django.contrib.admin import ModelAdmin
from django.db import models
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.translation import gettext_lazy as _


def row_action(
    label: str,
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

    row_actions_template = "admin/django_pgqueue/row_actions.html"
    change_form_template = "admin/django_pgqueue/change_form.html"

    class Media:
        # Replaces the package's stylesheet, a static file of its (uninstalled) app.
        extend = False
        css = {"all": ("django_pgqueue/admin.css",)}

    def check_row_action_permission(self, request: HttpRequest, permission: str) -> None:
        from django.core.exceptions import PermissionDenied

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

    def get_list_display(self, request: HttpRequest) -> tuple[str, ...]:
        display = tuple(ModelAdmin.get_list_display(self, request))
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
