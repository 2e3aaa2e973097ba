"""Who may do what: one authority model for every door (docs/http-api.md, "Authority").

An operation is done by an **actor**, one of three:

* an **operator**: a Django user, allowed by the operation's one permission
  (``Operation.permission``, a codename of this app);
* an **API key**: allowed by the operation's scope (``Operation.scope``), on the
  objects of the application it is bound to (a key bound to none is an operator's
  key and reaches every application). The keys of an inactive application are
  refused;
* a **portal customer**: allowed when the operation is declared for customers
  (``Operation.customer``), on their own application's objects, while that
  application is active.

:func:`authorize` is the one check of all three, called by the HTTP API, the portal
and the admin before they call the operation; the declarations in
``operations.py`` are its only input, so a new operation is covered everywhere by
being declared.

Fields belong to the operator or to the customer (:data:`OPERATOR_FIELDS`): a
customer (a key bound to an application, or the portal) never changes an
operator's field. And a key never grants more than its creator holds:
:func:`check_grant` maps each scope to the permissions it needs
(:data:`SCOPE_PERMISSIONS`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db import models

from .models.webhooks import Application, Endpoint

APP_LABEL = "django_pgqueue"

#: What holding each scope lets a key do, as the permissions an operator needs to do
#: the same in the admin. A key is never created with a scope whose permissions its
#: creator lacks (:func:`check_grant`). The one declaration of the mapping.
SCOPE_PERMISSIONS: dict[str, tuple[str, ...]] = {
    "send": ("add_event",),
    "read": ("view_endpoint", "view_delivery", "view_application"),
    "manage": (
        "add_endpoint",
        "change_endpoint",
        "delete_endpoint",
        "manage_endpoint",
        "replay_delivery",
        "add_application",
        "change_application",
        "delete_application",
    ),
    "secrets": ("manage_endpoint_secret",),
    # The job queues' flow control: fleet-wide, so for operators' keys only.
    "queues": ("view_queue", "change_queue", "pause_queue"),
    # A job's state and outcome, live or in the history.
    "jobs": ("view_job", "view_jobhistory"),
}

#: The scopes only an operator's key (bound to no application) may hold: what they
#: reach serves the whole fleet, not one customer. A key bound to an application is
#: never made with one (:func:`check_key_scopes`) and is refused one on every route
#: (:func:`check_scope`). The one declaration of the rule.
OPERATOR_SCOPES: frozenset[str] = frozenset({"queues", "jobs"})

#: The fields an operator sets and a customer may not change, by model. The API's
#: serializers and the portal's forms refuse them from this table.
OPERATOR_FIELDS: dict[type[models.Model], tuple[str, ...]] = {
    # Whether the customer is served, and the operator's own notes about them.
    Application: ("is_active", "metadata"),
    # What the operator lets this customer cost: concurrency and rate limits; and how
    # the endpoint is served (relay mode: batches to the operator's broker).
    Endpoint: ("max_in_flight", "rate_limit", "rate_period", "relay"),
}


@dataclass(frozen=True)
class Operator:
    """A Django user acting in the admin, a command or Python code."""

    user: Any


@dataclass(frozen=True)
class Customer:
    """A portal customer: the logged-in user the portal gave ``application`` to."""

    application: Application
    user: Any

    def describe(self) -> str:
        return f"portal user {self.user.get_username()!r} of application {self.application.uid!r}"


class Refused(PermissionError):
    """The actor may not do this. ``hidden``: the object is not theirs, so the door
    answers as for an object that does not exist (404), never revealing it."""

    def __init__(self, message: str, *, hidden: bool = False, field: str | None = None) -> None:
        super().__init__(message)
        self.hidden = hidden
        self.field = field


def has_permission(user: Any, codename: str) -> bool:
    """Whether ``user`` holds this app's permission ``codename``."""
    return bool(user.has_perm(f"{APP_LABEL}.{codename}"))


def is_key(actor: Any) -> bool:
    """An API key's principal (``api.http.Principal``): it carries scopes."""
    return hasattr(actor, "scopes")


def is_customer(actor: Any) -> bool:
    """Whether ``actor`` acts for one customer: the portal, or a key bound to an application."""
    return isinstance(actor, Customer) or (is_key(actor) and actor.application_id is not None)


def inactive_refusal(uid: str) -> Refused:
    """The one wording of "this customer's application is switched off"."""
    return Refused(
        f"The application {uid!r} is inactive: it is refused until an operator activates it."
    )


def authorize(actor: Any, operation: Any, application_id: int | None) -> None:
    """Raise :class:`Refused` unless ``actor`` may apply ``operation`` (a declaration of
    ``operations.py``) to an object of ``application_id`` (None: a global object).
    A fleet's object (``operation.fleet``: a job queue) is no customer's: a portal
    customer and a key bound to an application are refused it outright."""
    if getattr(operation, "fleet", False) and is_customer(actor):
        raise Refused(
            f"{operation.label} is for operators only: a {operation.kind} serves the whole "
            "fleet, not one application, so a key bound to an application cannot use it."
        )
    if isinstance(actor, Operator):
        if not has_permission(actor.user, operation.permission):
            raise Refused(
                f"{operation.label} needs the permission {APP_LABEL}.{operation.permission}."
            )
        return
    if isinstance(actor, Customer):
        if not actor.application.is_active:
            raise inactive_refusal(actor.application.uid)
        if actor.application.pk != application_id:
            raise Refused("Not found.", hidden=True)
        if not operation.customer:
            raise Refused(f"{operation.label} is for operators only.")
        return
    if is_key(actor):
        if actor.application_id is not None:
            if not getattr(actor, "application_active", True):
                raise inactive_refusal(actor.application_uid)
            if actor.application_id != application_id:
                raise Refused("Not found.", hidden=True)
        if operation.scope is None:
            raise Refused(f"{operation.label} is not open to API keys.")
        check_scope(actor, operation.scope)
        return
    raise TypeError(f"Not an actor: {actor!r}")


#: Where a row's application is, by the model an operation changes (jobs have none).
APPLICATION_OF: dict[str, str] = {
    "endpoint": "application_id",
    "delivery": "endpoint__application_id",
}


def authorized_ids(
    actor: Any, model: type[models.Model], operation: Any, ids: Iterable[int], using: str
) -> tuple[list[int], dict[int, str]]:
    """The ids of ``ids`` that ``actor`` may apply ``operation`` to, and the others as
    skips ("not found": another application's rows are not revealed). Refused (raised)
    when the actor may not apply it at all (a permission, a scope, an inactive
    application). The operations of ``operations.py`` call it when given an actor."""
    wanted = sorted(set(ids))
    path = APPLICATION_OF.get(model._meta.model_name or "")
    if path is None:
        authorize(actor, operation, None)
        return wanted, {}
    owner = dict(model._default_manager.using(using).filter(pk__in=wanted).values_list("pk", path))
    allowed, skipped = [], {}
    for pk in wanted:
        try:
            authorize(actor, operation, owner.get(pk))
        except Refused as exc:
            if not exc.hidden:
                raise
            skipped[pk] = "not found"
        else:
            allowed.append(pk)
    return allowed, skipped


def check_scope(key: Any, scope: str) -> None:
    """Refuse a key without ``scope`` (the HTTP API's routes check it first), and a key
    bound to an application an operator's scope, whatever it holds."""
    if scope in OPERATOR_SCOPES and key.application_id is not None:
        raise Refused(_operator_scope_refusal(scope))
    if scope not in key.scopes:
        raise Refused(
            f"This API key lacks the {scope!r} scope (it has: {', '.join(sorted(key.scopes))})."
        )


def _operator_scope_refusal(scope: str) -> str:
    return (
        f"The {scope!r} scope is for operators only: it reaches the whole fleet, not one "
        "application, so a key bound to an application cannot hold or use it."
    )


def check_key_scopes(scopes: Iterable[str], *, bound: bool) -> None:
    """ValueError naming each operator's scope (:data:`OPERATOR_SCOPES`) among ``scopes``
    of a key ``bound`` to an application (``api.keys`` and the admin's key form)."""
    if bound:
        refused = sorted(set(scopes) & OPERATOR_SCOPES)
        if refused:
            raise ValueError("; ".join(_operator_scope_refusal(scope) for scope in refused))


def check_owned_fields(actor: Any, obj: models.Model, changes: Mapping[str, Any]) -> None:
    """Refuse (:class:`Refused` naming the field) a customer's change of an operator's
    field of ``obj``. A value equal to the current one (or, for a new object, the
    default) is no change, so a client may send back what it read."""
    if not is_customer(actor):
        return
    for name in OPERATOR_FIELDS.get(type(obj), ()):
        if name in changes and changes[name] != getattr(obj, name):
            raise Refused(
                f"{name} is set by the operator; a customer cannot change it.", field=name
            )


def customer_fields(model: type[models.Model], fields: tuple[str, ...]) -> tuple[str, ...]:
    """``fields`` for a customer's form of ``model``; ValueError naming any operator's field
    among them, so a form can never offer one (the portal's forms are built with it)."""
    owned = sorted(set(fields) & set(OPERATOR_FIELDS.get(model, ())))
    if owned:
        raise ValueError(
            f"{', '.join(owned)} of {model.__name__} belong to the operator; "
            "a customer's form cannot offer them"
        )
    return fields


def check_grant(user: Any, scopes: Iterable[str]) -> None:
    """ValueError naming each scope whose permissions ``user`` lacks: a key never grants
    more than its creator holds. A superuser holds every permission."""
    refused = []
    for scope in sorted(set(scopes)):
        missing = [p for p in SCOPE_PERMISSIONS.get(scope, ()) if not has_permission(user, p)]
        if missing:
            needs = ", ".join(f"{APP_LABEL}.{p}" for p in missing)
            refused.append(f"the {scope!r} scope needs {needs}")
    if refused:
        raise ValueError(
            f"A key cannot grant more than you hold: {'; '.join(refused)}, which you lack"
        )
