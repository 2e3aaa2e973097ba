"""Read-only renderings for detail pages: pretty JSON, error history, status badges."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

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


def status_badge(status: str, label: str) -> SafeString:
    return format_html('<span class="pgq-status pgq-status-{}">{}</span>', status, label)


def error_history(errors: list[dict[str, Any]] | None) -> SafeString:
    """Each failed attempt, newest first: when, which worker, exception and traceback."""
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
