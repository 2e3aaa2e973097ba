"""What an API key changed, on record where the admin's changes are.

Every change made through the API (endpoints created, changed, deleted, enabled,
disabled, their secret rotated, a test event, replays, applications) writes one admin
``LogEntry`` per changed object, as the admin's own actions do (``admin/audit.py``):
an operator reads both in the object's *History* in the admin. ``LogEntry`` needs a
user: the entries are by ``PGQUEUE["API"]["AUDIT_USER"]`` ("pgqueue-api", created on
first use, inactive and without a usable password, so nobody logs in as it), and each
message names the key: ``Disable (was enabled, circuit closed) (by API key
pgq_5f0c2a9e11b4 'billing-service')``.

Each change also writes a line to the ``django_pgqueue.api`` logger with the same
words, so it is on record without the admin too (``AUDIT_USER: None``, or
``django.contrib.admin`` not installed).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.core.exceptions import FieldError
from django.db import DatabaseError, models
from django.utils.text import get_text_list

from ..authority import Customer
from ..conf import get_settings
from ..models.api import ApiKey
from .http import Principal

logger = logging.getLogger("django_pgqueue.api")

#: ``LogEntry.action_flag`` values (django.contrib.admin.models, which cannot be
#: imported without the admin installed).
ADDITION, CHANGE, DELETION = 1, 2, 3


def actor(principal: Principal | Customer) -> str:
    """``API key pgq_5f0c2a9e11b4 'billing-service'``: the key by its public prefix and
    its name (never the key); a portal customer by their user and application."""
    if isinstance(principal, Customer):
        return principal.describe()
    prefix, name = (
        ApiKey.objects.using(get_settings().DATABASE)
        .values_list("prefix", "name")
        .get(pk=principal.key_id)
    )
    return f"API key pgq_{prefix} {name!r}"


def rotated(grace_seconds: float) -> str:
    """The record of a secret rotation (the API's and the portal's)."""
    return f"Rotated the signing secret (the old one signs for {grace_seconds / 3600:g} h)"


def test_event_sent(delivery_pk: int) -> str:
    """The record of a test event (the API's and the portal's)."""
    return f"Sent a test event (delivery #{delivery_pk})"


def record(
    principal: Principal | Customer,
    model: type[models.Model],
    messages_by_pk: Mapping[Any, str],
    *,
    action_flag: int = CHANGE,
    reprs: Mapping[Any, str] | None = None,
) -> None:
    """Put the changes on record: ``messages_by_pk`` maps each changed object's pk to
    what was done (the admin's words); ``reprs`` names deleted objects.

    The one record of what a customer did, by API key or in the portal: a portal
    customer's entries are by their own user, a key's by ``AUDIT_USER``."""
    if not messages_by_pk:
        return
    who = actor(principal)
    messages = {pk: f"{message} (by {who})" for pk, message in messages_by_pk.items()}
    logger.info(
        "%s: %s %s",
        "webhook portal" if isinstance(principal, Customer) else "HTTP API",
        model._meta.model_name,
        "; ".join(f"#{pk}: {message}" for pk, message in messages.items()),
    )
    user_id = portal_user_id(principal) if isinstance(principal, Customer) else audit_user_id()
    if user_id is None:
        return
    from ..admin.audit import log_entries

    try:
        log_entries(user_id, model, messages, action_flag=action_flag, reprs=reprs)
    except DatabaseError:
        # The change is made and its log line written: the client is told it happened.
        logger.exception("HTTP API: the admin's log entry of a change could not be written")


def delete(principal: Principal, obj: models.Model, message: str) -> None:
    """Delete ``obj`` and put the deletion on record, under the name it had."""
    name, pk = str(obj), obj.pk
    obj.delete()
    record(principal, type(obj), {pk: message}, action_flag=DELETION, reprs={pk: name})


def snapshot(obj: models.Model, fields: Iterable[str]) -> dict[str, Any]:
    """The values of ``fields`` before a change, for :func:`record_change`."""
    return {name: getattr(obj, name) for name in fields}


def record_change(principal: Principal, obj: models.Model, before: Mapping[str, Any]) -> None:
    """``Changed description and event_types.``: the fields whose value changed."""
    changed = [name for name, value in before.items() if getattr(obj, name) != value]
    record(principal, type(obj), {obj.pk: change_message(changed)})


def change_message(changed: Iterable[str]) -> str:
    """The record of a change of these fields (the API's and the portal form's)."""
    names = list(changed)
    return f"Changed {get_text_list(names, 'and')}." if names else "No fields changed."


def portal_user_id(customer: Customer) -> int | None:
    """The pk of the portal customer's user, when the admin's log is installed."""
    pk = getattr(customer.user, "pk", None)
    return int(pk) if pk is not None and apps.is_installed("django.contrib.admin") else None


def audit_user_id() -> int | None:
    """The pk of ``AUDIT_USER``, created on first use; None when entries are not written."""
    name = get_settings().API["AUDIT_USER"]
    if name is None or not apps.is_installed("django.contrib.admin"):
        return None
    user_model = get_user_model()
    fields = {field.name for field in user_model._meta.get_fields()}
    # Nobody logs in as it: no usable password, inactive, no staff rights.
    defaults: dict[str, Any] = {"password": make_password(None)}
    defaults.update(
        {flag: False for flag in ("is_active", "is_staff", "is_superuser") if flag in fields}
    )
    try:
        user, _ = user_model._default_manager.get_or_create(
            **{user_model.USERNAME_FIELD: name}, defaults=defaults
        )
    except (DatabaseError, FieldError, TypeError, ValueError):
        # A custom user model with other required fields: create the user yourself.
        logger.exception(
            "HTTP API: could not create the audit user %r (PGQUEUE['API']['AUDIT_USER']); "
            "create it, or set AUDIT_USER to an existing user's name",
            name,
        )
        return None
    return int(user.pk)
