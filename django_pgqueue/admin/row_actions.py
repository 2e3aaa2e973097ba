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

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from admin_actions.admin import ActionsModelAdmin  # type: ignore[import-untyped]  # no py.typed
from django import forms
from django.contrib import admin
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

from ..authority import has_permission
from ..operations import Operation

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


def _has_permission(codename: str) -> Callable[..., bool]:
    def check(self: ModelAdmin, request: HttpRequest, obj: Any = None) -> bool:
        # The operator's rule of authority.authorize, the one check of every door.
        return has_permission(request.user, codename)

    check.__name__ = f"has_{codename}_permission"
    return check


def _bulk_action(op: Operation) -> Callable[..., HttpResponse | None]:
    """The bulk admin action of ``op``, named ``op.name`` (the name is the public contract)."""

    @admin.action(permissions=[op.permission], description=op.bulk_label)
    def action(self: RowActionsAdmin, request: HttpRequest, queryset: QuerySet):
        return self.confirm_bulk(
            request,
            queryset,
            op.name,
            label=op.label,
            explanation=op.explanation,
            apply=lambda ids: self.run_operation(request, op, ids, {}),
            **self.bulk_preview(queryset, op),
        )

    action.__name__ = op.name
    return action


def _operation_button(op: Operation) -> Callable[..., HttpResponse]:
    """The row/detail button of ``op`` (GET: confirm; POST: act)."""

    def view(self: RowActionsAdmin, request: HttpRequest, pk: int) -> HttpResponse:
        return self.confirmed_row_view(
            request,
            pk,
            label=op.label,
            explanation=op.explanation,
            applies=op.applies,
            form_class=self.operation_forms.get(op.name),
            act=lambda obj, data: self.run_operation(request, op, [obj.pk], data),
        )

    view.__name__ = button_name(op)
    return row_action(
        op.label,
        op.name.replace("_", "-"),
        permission=op.permission,
        applies=op.applies,
        style=op.style,
    )(view)


def button_name(op: Operation) -> str:
    """The method and URL name of ``op``'s button: ``pgqueue_job_replay``."""
    return f"pgqueue_{op.kind}_{op.name}"


class RowActionsAdmin(ActionsModelAdmin):
    """``ActionsModelAdmin`` with permission-aware, state-aware, POST-only buttons.

    A subclass sets :attr:`operations` (declarations from
    :mod:`django_pgqueue.operations`); from each one it gets a bulk action (when
    the declaration has a ``bulk_label``), a row and detail button, and the
    ``has_<permission>_permission`` check both use. The subclass carries
    operations out in :meth:`run_operation`.
    """

    #: This admin's operations, by name (``operations.JOB_OPERATIONS`` ...).
    operations: Mapping[str, Operation] = {}
    #: Operations whose button is on the detail page only, not on each row.
    detail_only: tuple[str, ...] = ()
    #: Operations whose confirmation page asks for more (a form class each).
    operation_forms: Mapping[str, type[forms.Form]] = {}
    row_actions_template = "admin/django_pgqueue/row_actions.html"
    confirm_template = "admin/django_pgqueue/confirm_operation.html"
    change_form_template = "admin/django_pgqueue/change_form.html"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.operations:
            return
        for op in cls.operations.values():
            check = f"has_{op.permission}_permission"
            if not hasattr(cls, check):
                setattr(cls, check, _has_permission(op.permission))
            if op.bulk_label and op.name not in cls.__dict__:
                setattr(cls, op.name, _bulk_action(op))
            if button_name(op) not in cls.__dict__:
                setattr(cls, button_name(op), _operation_button(op))
        declared = list(cls.operations.values())
        cls.actions = [op.name for op in declared if op.bulk_label]
        cls.actions_detail = tuple(button_name(op) for op in declared)
        cls.actions_row = tuple(
            button_name(op) for op in declared if op.name not in cls.detail_only
        )

    def run_operation(
        self, request: HttpRequest, op: Operation, ids: list[int], data: dict[str, Any]
    ) -> HttpResponse | None:
        """Carry out ``op`` on the rows ``ids`` (``data``: its form's cleaned data), write
        the audit log and tell the user. A response replaces the redirect."""
        raise NotImplementedError

    def bulk_preview(self, queryset: QuerySet, op: Operation) -> dict[str, Any]:
        """What the bulk confirmation page says will change (``will_change``, ``will_skip``)."""
        return {}

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
        # The column is rendered per row without the request, so the buttons this
        # user may use are decided here and bound into the column's function.
        permitted = self._permitted(request, tuple(self.actions_row))
        if permitted:

            def actions_holder(instance: models.Model) -> str:
                return render_to_string(
                    self.row_actions_template,
                    {"actions_row": self._buttons(permitted, instance)},
                )

            actions_holder.short_description = _("Actions")  # type: ignore[attr-defined]
            display += (actions_holder,)
        return display

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
        if request.method == "POST":
            for name in set(request.POST.getlist("action")) & set(self.actions or ()):
                needed = getattr(getattr(type(self), name, None), "allowed_permissions", ())
                if not all(getattr(self, f"has_{p}_permission")(request) for p in needed):
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
