"""Template filters of the admin pages: dates and durations through the admin's one
formatter (``django_pgqueue.admin.display``), so templates and columns agree."""

from __future__ import annotations

from datetime import datetime, timedelta

from django import template
from django.utils.safestring import SafeString

from ..admin.display import duration, when

register = template.Library()


@register.filter(name="pgq_when")
def pgq_when(value: datetime | None) -> SafeString:
    return when(value)


@register.filter(name="pgq_duration")
def pgq_duration(value: timedelta | float | None) -> str:
    return duration(value)
