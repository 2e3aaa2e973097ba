"""API keys of the HTTP API (docs/http-api.md): created here or by
``pgqueue_api_key``; the key is shown once, after "Save"; only its hash is kept.

A key never grants more than the staff user who creates or widens it holds: each
scope needs the permissions of ``authority.SCOPE_PERMISSIONS``."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.utils.translation import gettext_lazy as _

from ..api.keys import assign_new_key, check_scopes, revoke_keys, stored_scopes
from ..authority import check_grant, check_key_scopes
from ..models.api import ApiKey, ApiScope
from .display import WhenDatesMixin


class ApiKeyForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=ApiScope.choices, widget=forms.CheckboxSelectMultiple, label=_("Scopes")
    )

    #: The staff user saving the form (set by ``ApiKeyAdmin.get_form``).
    creator: Any = None

    class Meta:
        model = ApiKey
        fields = ("name", "scopes", "application", "rate_limit")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            # The boxes of the scopes the key holds; none for a malformed row.
            self.initial["scopes"] = sorted(self._held())

    def clean_scopes(self) -> list[str]:
        try:
            scopes = check_scopes(self.cleaned_data["scopes"])
            # Only the scopes being added: a key's existing scopes stay editable by
            # whoever may change keys, without holding them.
            check_grant(self.creator, set(scopes) - self._held())
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        return scopes

    def _held(self) -> frozenset[str]:
        """The key's scopes as stored: none for a new key or a row whose scopes are
        malformed (written by SQL), so every scope asked for counts as added."""
        if self.instance.pk is None:
            return frozenset()
        try:
            return stored_scopes(self.instance.scopes, bound=False)
        except ValueError:
            return frozenset()

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        # The application is cleaned after the scopes: an operator's scope on a key
        # bound to one is refused here, naming the scope.
        if cleaned.get("scopes") and cleaned.get("application") is not None:
            try:
                check_key_scopes(cleaned["scopes"], bound=True)
            except ValueError as exc:
                self.add_error("scopes", str(exc))
        return cleaned


@admin.register(ApiKey)
class ApiKeyAdmin(WhenDatesMixin, admin.ModelAdmin):
    form = ApiKeyForm
    list_display = ("name", "key_prefix", "scopes", "application", "last_used_at", "revoked_at")
    list_filter = ("revoked_at", "application")
    search_fields = ("name", "=prefix")
    readonly_fields = ("key_prefix", "created_at", "last_used_at", "revoked_at")
    actions = ["revoke"]

    def get_form(self, request: Any, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        return type(form.__name__, (form,), {"creator": request.user})

    @admin.display(description=_("key"))
    def key_prefix(self, obj: ApiKey) -> str:
        return f"pgq_{obj.prefix}_…" if obj.prefix else "-"

    def save_model(self, request: Any, obj: ApiKey, form: Any, change: bool) -> None:
        if not change:
            key = assign_new_key(obj)
            super().save_model(request, obj, form, change)
            messages.warning(
                request,
                _("The new API key is shown only now; store it: %(key)s") % {"key": key},
            )
            return
        super().save_model(request, obj, form, change)

    @admin.action(description=_("Revoke the selected keys"), permissions=["change"])
    def revoke(self, request: Any, queryset: Any) -> None:
        count = revoke_keys(queryset.values_list("prefix", flat=True))
        self.message_user(request, _("Revoked %(count)d key(s).") % {"count": count})
