"""Read-only renderings for the admin pages: pretty JSON, error history, status badges,
and the one formatter of every date and duration the admin shows."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.core.exceptions import FieldDoesNotExist
from django.db import models
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from ..error_history import error_entries

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise


def pretty_json(value: Any) -> SafeString:
    """A JSON value, indented, in a ``<pre>`` (escaped)."""
    if value is None or value == "":
        return format_html('<span class="pgq-muted">{}</span>', "—")
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre class="pgq-json">{}</pre>', text)


def json_display(field: str, description: StrOrPromise):
    """An admin display method showing ``field`` as pretty JSON."""

    def show(modeladmin: Any, obj: Any) -> SafeString:
        return pretty_json(getattr(obj, field))

    show.short_description = description  # type: ignore[attr-defined]
    return show


def status_badge(status: str, label: StrOrPromise) -> SafeString:
    return format_html('<span class="pgq-status pgq-status-{}">{}</span>', status, label)


def error_history(stored: Any) -> SafeString:
    """Each failed attempt, newest first: when, which worker, exception and traceback
    (``error_history.error_entries``: a malformed row shows as an entry naming it)."""
    errors = error_entries(stored)
    if not errors:
        return format_html('<span class="pgq-muted">{}</span>', _("No errors recorded."))
    items = format_html_join(
        "",
        '<details class="pgq-error"{}><summary>{} {} · {} · {} · {}</summary>'
        '<pre class="pgq-traceback">{}</pre></details>',
        (
            (
                " open" if index == 0 else "",
                _("Attempt"),
                entry.get("attempt", "?"),
                entry.get("at", ""),
                entry.get("worker_id", "") or "—",
                entry.get("exception_class_path") or entry.get("error", ""),
                entry.get("traceback") or entry.get("message") or json.dumps(entry, default=str),
            )
            for index, entry in enumerate(reversed(errors))
        ),
    )
    return format_html('<div class="pgq-errors">{}</div>', items)


def first_line(text: str, length: int = 80) -> str:
    """The first line of ``text``, cut to ``length`` characters (for list columns)."""
    lines = (text or "").strip().splitlines()
    text = lines[0] if lines else ""
    return text if len(text) <= length else text[: length - 1] + "…"


def when(value: datetime | None) -> SafeString:
    """A moment, to the second, in the current time zone with its name.

    Every date of our admin pages goes through here, so a list never mixes Django's
    minute-precision format with ISO text carrying microseconds: seconds matter when
    reading a retry schedule or a lease, microseconds never do.
    """
    if value is None:
        return format_html('<span class="pgq-muted">{}</span>', "—")
    if timezone.is_aware(value):
        value = timezone.localtime(value)
    return format_html(
        '<time class="pgq-when" datetime="{}">{}</time>',
        value.isoformat(timespec="seconds"),
        value.strftime("%Y-%m-%d %H:%M:%S %Z").strip(),
    )


def duration(value: timedelta | float | None) -> str:
    """A length of time as an operator reads it ("45 s", "12 min 5 s", "3 h 20 min",
    "2 d 4 h"), from a ``timedelta`` or seconds: never a raw ``0:12:05.123456``."""
    if value is None:
        return "—"
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    seconds = max(round(seconds), 0)
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "min", 60)):
        if seconds >= size:
            rest = (seconds % size) // sub_size
            return f"{seconds // size} {unit} {rest} {sub}" if rest else f"{seconds // size} {unit}"
    if seconds >= 60:
        rest = seconds % 60
        return f"{seconds // 60} min {rest} s" if rest else f"{seconds // 60} min"
    return f"{seconds} s"


class WhenDatesMixin:
    """Shows every date column and read-only date field of the admin through
    :func:`when`, instead of Django's minute-precision ``DATETIME_FORMAT``.

    Each ``DateTimeField`` named in ``list_display``, ``readonly_fields`` or a
    read-only place of the fieldsets becomes ``<name>_when`` (sortable by the
    field, labelled with its verbose name) when the admin asks for them; the
    declared names stay as they are, so the admin's checks still read them.
    Editable date fields keep their form widgets.
    """

    model: Any

    def _when_name(self, name: Any) -> Any:
        if not isinstance(name, str):
            return name
        try:
            field = self.model._meta.get_field(name)
        except FieldDoesNotExist:
            return name
        if not isinstance(field, models.DateTimeField):
            return name
        attr = f"{name}_when"
        if attr not in self.__dict__:

            def show(obj: Any) -> SafeString:
                return when(getattr(obj, name))

            show.short_description = field.verbose_name  # type: ignore[attr-defined]
            show.admin_order_field = name  # type: ignore[attr-defined]
            setattr(self, attr, show)
        return attr

    def get_list_display(self, request: Any) -> Any:
        return tuple(self._when_name(n) for n in super().get_list_display(request))  # type: ignore[misc]

    def get_readonly_fields(self, request: Any, obj: Any = None) -> Any:
        names = super().get_readonly_fields(request, obj)  # type: ignore[misc]
        return tuple(self._when_name(n) for n in names)

    def get_fieldsets(self, request: Any, obj: Any = None) -> Any:
        readonly: set[Any] | None = set(super().get_readonly_fields(request, obj))  # type: ignore[misc]
        if not self.has_change_permission(request, obj):  # type: ignore[attr-defined]
            readonly = None  # a view-only page shows every field read-only

        def swap(name: Any) -> Any:
            if isinstance(name, (list, tuple)):
                return tuple(swap(n) for n in name)
            return self._when_name(name) if readonly is None or name in readonly else name

        return [
            (title, {**options, "fields": tuple(swap(n) for n in options["fields"])})
            for title, options in super().get_fieldsets(request, obj)  # type: ignore[misc]
        ]


def endpoint_label(endpoint_id: int, url: str, application: str | None) -> str:
    """How the admin names an endpoint wherever it lists one: id, URL and application,
    so two endpoints with one URL (say, of two customers) never look the same."""
    return f"#{endpoint_id} {url} · {application or _('global')}"


def progress_html(fraction: float | None, message: str | None, *, title: str | None = None) -> str:
    """A job's progress as a ``<progress>`` bar, its percentage in words and its
    message (``title``: the bar's tooltip); "-" before the task reports any."""
    if fraction is None:
        return format_html('<span class="pgq-muted">{}</span>', "-")
    percent = f"{fraction * 100:.0f} %"
    text = title if title is not None else (message or "")
    shown = message or ""
    return format_html(
        '<span class="pgq-progress" title="{}"><progress value="{}" max="1" aria-label="{}">'
        "{}</progress> {}{}</span>",
        text,
        f"{fraction:.3f}",
        percent,
        percent,
        percent,
        f" · {shown}" if shown else "",
    )
