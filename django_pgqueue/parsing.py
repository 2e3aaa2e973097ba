"""Strict parsing of the values that arrive as text: URL paths, query strings, form
fields and command arguments, checked before any of them reaches SQL.

Python's own parsing is too lenient for a database boundary: ``"²".isdigit()`` is
true and ``int()`` reads Arabic-Indic digits, and PostgreSQL refuses a NUL character in text (a
``DataError``, a 500 if nobody catches it) and an integer past ``bigint``. Every
door calls these two functions, so a bad value is one clear error naming the
parameter wherever it comes from. They raise :class:`BadValue` (a ``ValueError``);
each door turns it into its own refusal (the HTTP API a 400 problem+json, a command
an argparse error).
"""

from __future__ import annotations

#: The range of PostgreSQL's ``bigint`` (every id and counter column).
BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1

_ASCII_DIGITS = frozenset("0123456789")


class BadValue(ValueError):
    """A value that cannot be used; ``name`` is the parameter it came in."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name} {message}")
        self.name = name


def parse_int(
    value: str, name: str, *, minimum: int = BIGINT_MIN, maximum: int = BIGINT_MAX
) -> int:
    """``value`` as an integer: ASCII digits only (an optional leading ``-`` when
    ``minimum`` allows one), within ``minimum``..``maximum`` (at most ``bigint``)."""
    digits = value[1:] if value.startswith("-") and minimum < 0 else value
    if not digits or not set(digits) <= _ASCII_DIGITS or len(digits) > 19:
        raise BadValue(name, f"must be a whole number in ASCII digits, got {value!r}")
    number = int(value)
    low, high = max(minimum, BIGINT_MIN), min(maximum, BIGINT_MAX)
    if not low <= number <= high:
        raise BadValue(name, f"must be from {low} to {high}, got {number}")
    return number


def check_text(value: str, name: str) -> str:
    """``value`` unchanged if PostgreSQL can store it as text: no NUL character and no
    lone surrogate (which UTF-8 cannot encode)."""
    if "\x00" in value:
        raise BadValue(name, f"contains a NUL character (\\x00) at position {value.index(chr(0))}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadValue(name, f"contains a lone surrogate at position {exc.start}") from None
    return value
