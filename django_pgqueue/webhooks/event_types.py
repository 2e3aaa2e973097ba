"""The shape of ``PGQUEUE["WEBHOOKS"]["EVENT_TYPES"]``: declared event types, parsed.

Apart from ``catalogue.py`` (which reads the setting) because ``conf.py`` parses
the setting with it: this module reads no settings, so ``conf`` can import it
without an import circle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from .routing import EVENT_TYPE_PATTERN


@dataclass(frozen=True)
class EventType:
    name: str
    description: str
    schema: Mapping[str, Any] | None


def schema_validator_class() -> Any:
    """The ``jsonschema`` validator of Draft 2020-12, or a clear error without the extra."""
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
                schema_validator_class().check_schema(schema)
            except SchemaError as exc:
                raise ImproperlyConfigured(
                    f"{where}['schema'] is not a valid JSON Schema: {exc.message}"
                ) from None
        types[name] = EventType(name, str(entry.get("description", "")), schema)
    return types
