"""What the ``pinned_*`` scripts share: the command line, Django's setup, and the two
cases, pinned and clean, each run by the script's own ``case``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parent.parent
Row = TypeVar("Row")


def run_both(doc: str, case: Callable[[bool, int, int], list[Row]]) -> dict[bool, list[Row]]:
    """Parse ``--steps`` and ``--step`` (the script's docstring ``doc`` for ``--help``),
    set Django up on the test project, then run ``case(pinned, steps, step)`` pinned,
    then clean."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--step", type=int, default=10_000)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    return {pinned: case(pinned, args.steps, args.step) for pinned in (True, False)}
