"""Outside data made storable before it reaches SQL: outcome writes never fail on content.

What a worker records comes partly from outside: a webhook receiver's response
headers and body, exception messages and tracebacks (which quote whatever the
failing code was handed), a task's return value. PostgreSQL refuses NUL in
``text`` and ``\\u0000`` or an unpaired surrogate escape in ``jsonb``, and psycopg
cannot encode a lone surrogate at all; one such value in a coalesced completion
batch would fail the whole statement. So every outcome passes through here on its
way to the completer's statement:

* NUL becomes the four characters ``\\x00`` and a lone surrogate ``\\udc80`` (its
  escape as text): visible to whoever reads the row, never silently dropped;
* long text is cut at a cap, with a note saying how much was cut.

The checks cost a few C-speed scans of text that is almost always clean; only text
that fails them is rebuilt.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .conf import get_settings
from .contract import check_json_document
from .exceptions import ResultNotStorable
from .outcomes import JobOutcome

#: ``last_error`` is a one-line summary (the full text is in ``errors``).
LAST_ERROR_CAP = 2000
#: One string inside a stored error entry (a traceback quoting a huge value).
ERROR_STRING_CAP = 64 * 1024
#: One response header name or value as stored in the attempt log.
HEADER_CAP = 8 * 1024


def storable_text(text: str, cap: int | None = None) -> str:
    """``text`` with NUL and lone surrogates escaped visibly, cut at ``cap`` characters."""
    if text.isascii():
        if "\x00" in text:
            text = text.replace("\x00", "\\x00")
    else:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            # backslashreplace writes a lone surrogate as the text "\udc80".
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
        if "\x00" in text:
            text = text.replace("\x00", "\\x00")
    if cap is not None and len(text) > cap:
        cut = len(text) - cap
        text = f"{text[:cap]}... [{cut} more characters not stored]"
    return text


def storable_json_text(text: str, string_cap: int | None = None) -> str:
    """JSON ``text`` that ``jsonb`` accepts: strings inside made storable (and capped).

    ``text`` is what ``json.dumps`` wrote. It is returned as is unless it may hold
    ``\\u0000``, a surrogate escape or a lone surrogate, or is longer than
    ``string_cap`` (a string in it may then be too); only then is it parsed, cleaned
    and written again. Text that does not even parse is stored as one JSON string.
    """
    suspect = (
        "\\u0000" in text or "\\ud" in text or (string_cap is not None and len(text) > string_cap)
    )
    if not suspect:
        if text.isascii():
            return text
        try:
            text.encode("utf-8")
            return text
        except UnicodeEncodeError:
            pass
    try:
        return json.dumps(_clean(json.loads(text), string_cap), separators=(",", ":"))
    except (ValueError, RecursionError):
        return json.dumps(storable_text(text, string_cap))


def storable_headers(headers: Mapping[str, str]) -> str:
    """Headers as a ``jsonb``-safe JSON object (names and values escaped, capped).

    Written once by ``json.dumps`` (ASCII: a NUL or lone surrogate shows as its escape),
    then cleaned by :func:`storable_json_text` only if it may need it, so the clean
    headers of every attempt cost one dump and three scans, not two calls per header.
    """
    text = json.dumps({str(name): str(value) for name, value in headers.items()})
    return storable_json_text(text, HEADER_CAP)


def _clean(value: Any, cap: int | None) -> Any:
    if isinstance(value, str):
        return storable_text(value, cap)
    if isinstance(value, list):
        return [_clean(v, cap) for v in value]
    if isinstance(value, dict):
        return {storable_text(k, cap): _clean(v, cap) for k, v in value.items()}
    return value


def make_outcome_storable(outcome: Any) -> None:
    """Make a worker ``Outcome``'s text fields storable, in place (see module doc).

    A delivery's response content is made storable when its outcome is built.
    """
    if isinstance(outcome, JobOutcome):
        if outcome.result_json is not None:
            outcome.result_json = storable_json_text(outcome.result_json)
        if outcome.error_json is not None:
            outcome.error_json = storable_json_text(outcome.error_json, ERROR_STRING_CAP)
    if outcome.last_error is not None:
        outcome.last_error = storable_text(outcome.last_error, LAST_ERROR_CAP)


def return_value_json(value: Any) -> str:
    """A task's return value as JSON text, under the same contract as its arguments.

    Raises ``ResultNotStorable`` or ``PayloadTooLarge`` (above
    ``PGQUEUE["MAX_RESULT_BYTES"]``): the worker records that as the attempt's
    failure, like an exception raised by the task.
    """
    conf = get_settings()
    if value is None and conf.MAX_RESULT_BYTES >= 4:
        return "null"  # most tasks return nothing: no need to serialise and check it
    return check_json_document(
        value,
        name="result",
        max_bytes=conf.MAX_RESULT_BYTES,
        max_depth=conf.MAX_JSON_DEPTH,
        error=ResultNotStorable,
        limit_name="PGQUEUE['MAX_RESULT_BYTES']",
    )
