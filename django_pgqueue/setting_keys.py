"""Unknown keys of a settings dict, refused with the closest valid key.

A leaf module (it imports nothing of the package) so that both ``conf`` and the
modules ``conf`` calls to validate a part of ``PGQUEUE`` (``periodic.spec``) can use
it without importing each other.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured


def check_keys(name: str, given: Mapping[str, Any], valid: Iterable[str]) -> None:
    """Refuse keys of ``given`` that are not in ``valid``, each with the closest valid
    key when one is close (a typo, the wrong case), and the whole list."""
    valid = sorted(valid)
    unknown = sorted(set(given) - set(valid), key=str)
    if unknown:
        named = ", ".join(_with_suggestion(key, valid) for key in unknown)
        raise ImproperlyConfigured(
            f"Unknown key(s) in {name}: {named}. Valid keys are: {', '.join(valid)}."
        )


def _with_suggestion(key: Any, valid: list[str]) -> str:
    if not isinstance(key, str):
        return repr(key)
    # Case-insensitive first: "batch_size" is BATCH_SIZE, however far difflib finds it.
    by_case = {v.lower(): v for v in valid}
    close = [by_case[key.lower()]] if key.lower() in by_case else []
    close = close or difflib.get_close_matches(key, valid, n=1, cutoff=0.75)
    return f"{key} (did you mean {close[0]!r}?)" if close else key
