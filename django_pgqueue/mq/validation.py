"""What the message-queue API accepts: queue names, messages, headers and bounds.

Everything here runs before any SQL, so bad input is refused with an error that
names the problem and nothing is written.

The message rules are those of task arguments (UTF-8 size, nesting depth, no NUL,
no lone surrogate, errors naming the path of the bad value). ``check_message`` is
kept small and self-contained on purpose: it is meant to become a call to the
shared argument contract of the package once that exists in one place.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from typing import Any

from ..conf import get_settings
from .exceptions import InvalidMessage, InvalidQueueName

#: Longest queue name: the queue's table is ``pgqueue_mq_q_<name>`` and its index
#: ``pgqueue_mq_q_<name>_vt``, which must fit PostgreSQL's 63-byte identifiers. It
#: is also pgmq's limit, so a name valid there is valid here.
MAX_NAME_LENGTH = 47

#: Letters, digits, ``_`` and ``-``, starting with a letter or ``_``. The name is
#: always quoted as an identifier; the pattern keeps names readable in table
#: names, channels and URLs.
NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")

#: Deepest nesting of objects and arrays in a message or its headers.
MAX_DEPTH = 64

#: Bounds of the numeric arguments (seconds and counts).
MAX_VT_SECONDS = 7 * 24 * 3600
MAX_DELAY_SECONDS = 365 * 24 * 3600
MAX_QTY = 1000
MAX_BATCH = 10_000
MAX_POLL_SECONDS = 600


def check_name(name: object) -> str:
    """Return ``name`` if it is a valid queue name; raise InvalidQueueName otherwise."""
    if not isinstance(name, str):
        raise InvalidQueueName(f"a queue name must be a string, got {type(name).__name__}")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidQueueName(
            f"queue name is too long, maximum length is {MAX_NAME_LENGTH} characters: {name!r}"
        )
    if not NAME_PATTERN.fullmatch(name):
        raise InvalidQueueName(
            f"queue name {name!r} must be letters, digits, '_' or '-', "
            "starting with a letter or '_'"
        )
    return name


def check_seconds(what: str, value: object, maximum: float, *, minimum: float = 0) -> float:
    """A number of seconds within ``[minimum, maximum]`` (bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise ValueError(f"{what} must be a number of seconds, got {value!r}")
    if not minimum <= value <= maximum:
        raise ValueError(f"{what} must be between {minimum:g} and {maximum:g} seconds, got {value}")
    return float(value)


def check_count(what: str, value: object, maximum: int) -> int:
    """A whole count within ``[1, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    if not 1 <= value <= maximum:
        raise ValueError(f"{what} must be between 1 and {maximum}, got {value}")
    return value


def check_delay(delay: object) -> tuple[float, dt.datetime | None]:
    """``(seconds, at)`` from a delay in seconds or an aware datetime."""
    if isinstance(delay, dt.datetime):
        if delay.tzinfo is None:
            raise ValueError(f"delay must be a timezone-aware datetime, got {delay!r}")
        return 0.0, delay
    return check_seconds("delay", delay, MAX_DELAY_SECONDS), None


def check_message(value: object, what: str = "message") -> str:
    """Serialize a message (a JSON object or array) after checking the argument rules.

    Returns the JSON text. The common case costs one ``json.dumps`` and a few
    string scans; the recursive walk that names the bad path runs only when one of
    the scans says something is wrong.
    """
    if not isinstance(value, dict | list):
        raise InvalidMessage(f"{what} must be a JSON object or array, got {type(value).__name__}")
    return _serialize(value, what)


def check_headers(value: object) -> str | None:
    """Serialize optional headers (a JSON object) with the same rules as a message."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidMessage(f"headers must be a JSON object, got {type(value).__name__}")
    return _serialize(value, "headers")


def _serialize(value: dict[str, Any] | list[Any], what: str) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        _walk(value, what, 0)
        raise  # _walk names the problem; this is only reached for an unforeseen one
    # A NUL shows up escaped; a lone surrogate fails to encode; depth can only
    # exceed the limit if there are that many brackets at all.
    suspicious = "\\u0000" in text or text.count("[") + text.count("{") > MAX_DEPTH
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        suspicious = True
        size = 0
    if suspicious:
        _walk(value, what, 0)
    limit = get_settings().MAX_ARGS_BYTES
    if size > limit:
        raise InvalidMessage(
            f"{what} is {size} bytes of JSON, over the limit of {limit} (PGQUEUE['MAX_ARGS_BYTES'])"
        )
    return text


def _walk(value: Any, path: str, depth: int) -> None:
    """Raise InvalidMessage naming the first value under ``path`` that breaks a rule."""
    if isinstance(value, dict | list):
        if depth >= MAX_DEPTH:
            raise InvalidMessage(f"{path} is nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise InvalidMessage(
                        f"{path} has a key of type {type(key).__name__}; JSON keys are strings"
                    )
                _check_text(key, f"{path} key {key!r}")
                _walk(item, f"{path}[{key!r}]", depth + 1)
        else:
            for index, item in enumerate(value):
                _walk(item, f"{path}[{index}]", depth + 1)
    elif isinstance(value, str):
        _check_text(value, path)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidMessage(f"{path} is {value!r}, which JSON cannot represent")
    elif value is not None and not isinstance(value, bool | int):
        raise InvalidMessage(f"{path} is a {type(value).__name__}, which is not JSON")


def _check_text(text: str, path: str) -> None:
    if "\x00" in text:
        raise InvalidMessage(f"{path} contains a NUL character, which PostgreSQL cannot store")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidMessage(f"{path} contains a lone surrogate, which is not UTF-8") from exc
