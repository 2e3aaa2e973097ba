"""The portal's endpoint form: the fields a customer may set, in words they read."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from ..authority import customer_fields
from ..models.webhooks import Endpoint
from ..webhooks.catalogue import catalogue
from ..webhooks.routing import subscription_keys


class ListField(forms.CharField):
    """A list typed one item per line (or separated by commas): no JavaScript needed."""

    widget = forms.Textarea(attrs={"rows": 3})

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):
            return "\n".join(value)
        return value

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]
        text = super().to_python(value) or ""
        return [item.strip() for item in text.replace(",", "\n").splitlines() if item.strip()]


class HttpsURLField(forms.URLField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(assume_scheme="https", **kwargs)


class EndpointForm(forms.ModelForm):
    """URL, description, event types and channels. The application is the portal's
    (set on the instance by the view), never a field: it cannot be changed by a form."""

    event_types = ListField(
        required=False,
        label=_("Event types"),
        help_text=_(
            "One per line, e.g. order.paid, or order.* for every order event. "
            "Leave empty to receive every event."
        ),
    )
    channels = ListField(
        required=False,
        label=_("Channels"),
        help_text=_("One per line. Leave empty to receive events of every channel."),
    )

    class Meta:
        model = Endpoint
        # Never an operator's field (limits): customer_fields refuses one at import.
        fields = customer_fields(Endpoint, ("url", "description", "event_types", "channels"))
        labels = {"url": _("Endpoint URL")}
        help_texts = {"url": _("The https address we send your webhooks to.")}
        widgets = {"description": forms.TextInput()}
        # A bare host means https, as in the admin.
        field_classes = {"url": HttpsURLField}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        declared = sorted(catalogue())
        if declared:
            # With a catalogue the customer picks from what is sent, not from guesses.
            self.fields["event_types"].help_text = _(
                "One per line, or a wildcard such as order.* for several. Leave empty to "
                "receive every event. The event types we send: %(types)s."
            ) % {"types": ", ".join(declared)}

    def clean_event_types(self) -> list[str]:
        """With a declared catalogue, each line names a declared type or a wildcard that
        covers one: a typo would subscribe to an event that never comes."""
        wanted: list[str] = self.cleaned_data["event_types"]
        declared = catalogue()
        if not declared:
            return wanted
        covered = {key for name in declared for key in subscription_keys(name)}
        unknown = [item for item in wanted if item not in covered]
        if unknown:
            raise forms.ValidationError(
                _("We send no event of type %(unknown)s. The event types we send: %(types)s.")
                % {"unknown": ", ".join(unknown), "types": ", ".join(sorted(declared))}
            )
        return wanted
