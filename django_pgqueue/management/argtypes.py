"""argparse types shared by the management commands: numbers with a bound, checked
with a message naming the bad value."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..contract import strict_int


def bounded(
    kind: type[int] | type[float], minimum: float, *, strict: bool = False
) -> Callable[[str], int | float]:
    """An argparse type: a number of ``kind`` at least ``minimum`` (above it if ``strict``)."""
    noun = "a whole number" if kind is int else "a number of seconds"

    def parse(value: str) -> int | float:
        try:
            # Whole numbers in ASCII digits within bigint (``int()`` takes Arabic-Indic digits too).
            number = strict_int(value, "value") if kind is int else kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {noun}, got {value!r}") from None
        if number < minimum or (strict and number == minimum):
            bound = f"above {minimum:g}" if strict else f"{minimum:g} or more"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return number

    return parse


positive_int = bounded(int, 1)
non_negative_int = bounded(int, 0)
positive_float = bounded(float, 0, strict=True)
non_negative_float = bounded(float, 0)
