"""The admin's "Change limits" form of one queue: the six limits as text fields,
each checked by ``queue_limits.limits`` (the rules ``queues.configure``, the HTTP
API and ``pgqueue_queue`` apply), so a value they refuse is refused here with the
same words, on its field, before anything is written."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from .. import queue_limits
from ..queue_limits import LIMIT_FIELDS, QueueLimits

_PERIODS = frozenset({"rate_period", "key_rate_period"})


class QueueLimitsForm(forms.Form):
    """Blank means no limit (a blank period means the default, 1 second)."""

    def __init__(self, data: Any = None, *, initial_limits: QueueLimits | None = None) -> None:
        super().__init__(data, initial=(initial_limits or QueueLimits()).as_dict())
        for field in LIMIT_FIELDS:
            help_text = (
                _("seconds; blank: 1")
                if field in _PERIODS
                else _("a whole number from 1 to %(max)d; blank: no limit")
                % {"max": queue_limits.INT_MAX}
            )
            self.fields[field] = forms.CharField(
                label=field.replace("_", " "), required=False, max_length=40, help_text=help_text
            )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        for field in LIMIT_FIELDS:
            if field not in cleaned:
                continue  # the field's own check (max_length) already failed
            raw = cleaned[field].strip()
            value: str | int | None = raw or (1 if field in _PERIODS else None)
            try:
                checked = queue_limits.limits({field: value})
            except ValueError as exc:
                self.add_error(field, f"{exc}.")
                continue
            cleaned[field] = getattr(checked, field)
        return cleaned

    def limits(self) -> dict[str, Any]:
        """The checked limits, for ``queues.configure(name, **form.limits())``."""
        return {field: self.cleaned_data[field] for field in LIMIT_FIELDS}
