"""What an operator did, told twice: to the operator (messages) and to the log (LogEntry)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.http import HttpRequest

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise


def log_changes(
    request: HttpRequest,
    model: type[models.Model],
    messages_by_pk: Mapping[int, str],
) -> None:
    """One admin ``LogEntry`` per changed object, in one INSERT, by the admin's user.

    ``messages_by_pk`` maps each object's pk to its change message (what was
    done and from which state). Django's ``log_actions`` takes one message for
    all objects; ours differ per object, so the entries are built here.
    """
    # The admin's user is logged in.
    log_entries(request.user.pk, model, messages_by_pk)  # type: ignore[arg-type]


def log_entries(
    user_id: int,
    model: type[models.Model],
    messages_by_pk: Mapping[Any, str],
    *,
    action_flag: int = CHANGE,
    reprs: Mapping[Any, str] | None = None,
) -> None:
    """One ``LogEntry`` per object by ``user_id``, in one INSERT: the admin's actions
    and the HTTP API's changes (``api/audit.py``) alike. ``reprs`` names objects
    that no longer exist (a deletion); the others are read."""
    if not messages_by_pk:
        return
    content_type = ContentType.objects.get_for_model(model, for_concrete_model=False)
    objects = model._default_manager.in_bulk(list(messages_by_pk)) if reprs is None else reprs
    LogEntry.objects.bulk_create(
        [
            LogEntry(
                user_id=user_id,
                content_type_id=content_type.pk,
                object_id=str(pk),
                object_repr=str(objects.get(pk, f"{model._meta.verbose_name} #{pk}"))[:200],
                action_flag=action_flag,
                change_message=message,
            )
            for pk, message in messages_by_pk.items()
        ]
    )


def summarize_skips(skipped: Mapping[int, str], limit: int = 10) -> str:
    """``"2 held by a worker (in progress): #4, #9; 1 is succeeded: #7"``."""
    by_reason: dict[str, list[int]] = defaultdict(list)
    for pk, reason in sorted(skipped.items()):
        by_reason[reason].append(pk)
    parts = []
    for reason, pks in by_reason.items():
        shown = ", ".join(f"#{pk}" for pk in pks[:limit])
        more = f" and {len(pks) - limit} more" if len(pks) > limit else ""
        parts.append(f"{len(pks)} {reason}: {shown}{more}")
    return "; ".join(parts)


def report(
    modeladmin,
    request: HttpRequest,
    done: StrOrPromise,
    changed: Iterable[int],
    skipped: Mapping[int, str],
) -> None:
    """``message_user`` with the changed count and each skip's reason."""
    changed = list(changed)
    opts = modeladmin.model._meta
    noun = opts.verbose_name if len(changed) == 1 else opts.verbose_name_plural
    if changed:
        modeladmin.message_user(request, f"{done}: {len(changed)} {noun}.", messages.SUCCESS)
    if skipped:
        modeladmin.message_user(
            request,
            f"Skipped {len(skipped)}: {summarize_skips(skipped)}.",
            messages.WARNING,
        )
    if not changed and not skipped:
        modeladmin.message_user(request, "Nothing was selected.", messages.WARNING)
