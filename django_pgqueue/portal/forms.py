"""The portal's endpoint form: the fields a customer may set, in words they read."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from ..authority import customer_fields
from ..conf import DESTINATION_SCHEMES, get_settings
from ..models.webhooks import DestinationFormField, Endpoint
from ..webhooks.brokers.urls import has_typed_password
from ..webhooks.catalogue import catalogue
from ..webhooks.routing import subscription_keys


class ListField(forms.CharField):
    """A list typed one item per line (or separated by commas): no JavaScript needed."""

    widget = forms.Textarea(attrs={"rows": 3})

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):
            # Items that are no text (a row changed by SQL) are shown as JSON, for the
            # customer to correct: saving checks each line as the model does.
            return "\n".join(v if isinstance(v, str) else json.dumps(v) for v in value)
        return value

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]
        text = super().to_python(value) or ""
        return [item.strip() for item in text.replace(",", "\n").splitlines() if item.strip()]


#: How the form's help text describes each kind of destination.
_DESTINATION_HELP = {
    "https": _("an https:// address"),
    "http": _("an http:// address"),
    "amqp": _("a RabbitMQ exchange: amqp://USER:PASSWORD@HOST:PORT/VHOST?exchange=NAME"),
    "nats": _("a NATS JetStream subject: nats://USER:PASSWORD@HOST:PORT?subject=NAME"),
}


def _either(schemes: list[str]) -> str:
    """``https://``, ``https:// or nats://``, ``https://, amqp:// or nats://``."""
    named = [f"{scheme}://" for scheme in schemes]
    if len(named) == 1:
        return named[0]
    return _("%(some)s or %(last)s") % {"some": ", ".join(named[:-1]), "last": named[-1]}


class PortalURLField(DestinationFormField):
    """An endpoint URL of a kind ``PGQUEUE["WEBHOOKS"]["PORTAL_DESTINATIONS"]`` opens to
    customers (a bare host means https, as in the admin), shown with its password masked.

    Only the kind is the portal's to decide. Whether the URL may receive webhooks (the
    SSRF rules, ``ALLOW_HTTP``, the broker allow-lists) is ``Endpoint.clean``'s, the
    check the admin and the API make, which the form runs after this one.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(assume_scheme="https", **kwargs)

    def validate(self, value: str) -> None:
        super().validate(value)
        # Read at each use: the form's fields are built once, at import.
        allowed = get_settings().WEBHOOKS["PORTAL_DESTINATIONS"]
        scheme = value.partition(":")[0].lower()
        if value and scheme not in allowed:
            # Never the URL itself in the message: it may hold a password.
            known = _("%(scheme)s:// addresses are not accepted here. ") % {"scheme": scheme}
            raise forms.ValidationError(
                (known if scheme in DESTINATION_SCHEMES else "")
                + _("Enter an address starting with %(allowed)s.") % {"allowed": _either(allowed)},
                code="scheme",
            )


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
        widgets = {"description": forms.TextInput()}
        field_classes = {"url": PortalURLField}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        allowed = get_settings().WEBHOOKS["PORTAL_DESTINATIONS"]
        help_text = _("Where we send your webhooks: %(kinds)s.") % {
            "kinds": "; or ".join(str(_DESTINATION_HELP[scheme]) for scheme in allowed)
        }
        if {"amqp", "nats"} & set(allowed):
            help_text += " " + _(
                "A password is never shown again: leave *** in its place to keep it."
            )
        self.fields["url"].help_text = help_text
        declared = sorted(catalogue())
        if declared:
            # With a catalogue the customer picks from what is sent, not from guesses.
            self.fields["event_types"].help_text = _(
                "One per line, or a wildcard such as order.* for several. Leave empty to "
                "receive every event. The event types we send: %(types)s."
            ) % {"types": ", ".join(declared)}

    def full_clean(self) -> None:
        super().full_clean()
        # A refused form shows the URL masked; on an edit, *** sent back keeps the
        # stored password: say so, or a new one would be dropped without a word.
        if self.errors and has_typed_password(self.data.get("url")):
            again = [_("Type the password again: it is not shown back.")]
            if self.instance.pk is not None:
                again.append(_("Left as ***, the saved password is kept."))
            self.add_error("url", " ".join(map(str, again)))

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
