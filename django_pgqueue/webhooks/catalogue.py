"""The event type catalogue: the types a project declares, with a description and an
optional JSON Schema of their payload (``PGQUEUE["WEBHOOKS"]["EVENT_TYPES"]``).

``send_event`` checks against it when asked (``VALIDATE_EVENT_TYPES``, or
``validate=True`` on one call): an undeclared type, or a payload the type's schema
refuses, is a ``ValueError`` naming the type and the place in the payload, raised
before anything is written. Schemas are checked with the ``jsonschema`` library
(the ``schema`` extra), Draft 2020-12.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from ..conf import get_settings
from ..exceptions import EventSchemaError
from .routing import EVENT_TYPE_PATTERN


@dataclass(frozen=True)
class EventType:
    name: str
    description: str
    schema: Mapping[str, Any] | None


def _validator_class() -> Any:
    try:
        from jsonschema import Draft202012Validator
    except ImportError as exc:  # pragma: no cover - the extra is installed in CI
        raise ImproperlyConfigured(
            "PGQUEUE['WEBHOOKS']['EVENT_TYPES'] declares JSON Schemas: install the "
            "jsonschema package (pip install 'django-pgqueue[schema]')."
        ) from exc
    return Draft202012Validator


def parse_catalogue(raw: Any, prefix: str) -> dict[str, EventType]:
    """The declared types, checked: names follow the event type rule, each entry is
    ``{"description": str, "schema": dict | None}`` and each schema is a valid one."""
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(f"{prefix} must be a dict of event type names, got {raw!r}")
    types: dict[str, EventType] = {}
    for name, entry in raw.items():
        where = f"{prefix}[{name!r}]"
        if not isinstance(name, str) or not EVENT_TYPE_PATTERN.fullmatch(name):
            raise ImproperlyConfigured(f"{where}: {name!r} is not a valid event type name")
        if not isinstance(entry, Mapping) or set(entry) - {"description", "schema"}:
            raise ImproperlyConfigured(
                f"{where} must be a dict with 'description' and optionally 'schema'"
            )
        schema = entry.get("schema")
        if schema is not None:
            if not isinstance(schema, Mapping):
                raise ImproperlyConfigured(f"{where}['schema'] must be a JSON Schema (a dict)")
            from jsonschema.exceptions import SchemaError

            try:
                _validator_class().check_schema(schema)
            except SchemaError as exc:
                raise ImproperlyConfigured(
                    f"{where}['schema'] is not a valid JSON Schema: {exc.message}"
                ) from None
        types[name] = EventType(name, str(entry.get("description", "")), schema)
    return types


def catalogue() -> dict[str, EventType]:
    """The declared event types, by name (empty when none are declared)."""
    return get_settings().WEBHOOKS["EVENT_TYPES"]


def validate_event(event_type: str, payload: Any) -> None:
    """Raise ``EventSchemaError`` (a ValueError) unless ``event_type`` is declared and
    ``payload`` matches its schema."""
    declared = catalogue().get(event_type)
    if declared is None:
        raise EventSchemaError(
            f"send_event({event_type!r}): not a declared event type; declare it in "
            f"PGQUEUE['WEBHOOKS']['EVENT_TYPES'] or send one of: "
            f"{', '.join(sorted(catalogue())) or '(none declared)'}"
        )
    if declared.schema is None:
        return
    error = next(iter(_validator_class()(declared.schema).iter_errors(payload)), None)
    if error is not None:
        raise EventSchemaError(
            f"send_event({event_type!r}): the payload does not match the declared schema "
            f"at {error.json_path}: {error.message}. Nothing was sent."
        )
