"""Functions planted in ``public`` that would win over a built-in for an unqualified call
(an argument type closer than the built-in's): the search_path tests of every door."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from django_pgqueue.db import connect

_DEFAULT = re.compile(r"\s+DEFAULT\s+[^,)]+")


@contextmanager
def planted_functions(signatures: Iterable[tuple[str, str]]) -> Iterator[None]:
    """Create each ``(signature, return type)`` as a function that raises 'planted
    function ran', and drop them all afterwards."""
    planted = list(signatures)
    with connect("pgqueue-test-plant", prepare=False) as conn:
        for signature, returns in planted:
            conn.execute(
                f"CREATE FUNCTION {signature} RETURNS {returns} LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'planted function ran'; END $$"
            )
    try:
        yield
    finally:
        with connect("pgqueue-test-plant", prepare=False) as conn:
            for signature, _ in planted:
                conn.execute(f"DROP FUNCTION IF EXISTS {_DEFAULT.sub('', signature)}")
