"""The event type catalogue: the types a project declares, with a description and an
optional JSON Schema of their payload (``PGQUEUE["WEBHOOKS"]["EVENT_TYPES"]``).

``send_event`` checks against it when asked (``VALIDATE_EVENT_TYPES``, or
``validate=True`` on one call): an undeclared type, or a payload the type's schema
refuses, is a ``ValueError`` naming the type and the place in the payload, raised
before anything is written. Schemas are checked with the ``jsonschema`` library
(the ``schema`` extra), Draft 2020-12.
"""

from __future__ import annotations

from typing import Any

from ..conf import get_settings
from ..exceptions import EventSchemaError
from .event_types import EventType, schema_validator_class


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
    error = next(iter(schema_validator_class()(declared.schema).iter_errors(payload)), None)
    if error is not None:
        raise EventSchemaError(
            f"send_event({event_type!r}): the payload does not match the declared schema "
            f"at {error.json_path}: {error.message}. Nothing was sent."
        )
