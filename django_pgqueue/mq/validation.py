"""What the message-queue API accepts: queue names, messages, headers and bounds.

Everything here runs before any SQL, so bad input is refused with an error that
names the problem and nothing is written.

The message rules are those of task arguments (UTF-8 size, nesting depth, no NUL,
no lone surrogate, errors naming the path of the bad value): ``check_message``
applies the package's one contract (``contract.py``).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

from ..conf import get_settings
from ..contract import BIGINT_MAX, check_json_document, strict_int
from ..exceptions import PayloadTooLarge
from .exceptions import InvalidMessage, InvalidQueueName
from .sql import ARCHIVE_PARTITION_MARK, ARCHIVE_PREFIX

#: Longest queue name: the queue's table is ``pgqueue_mq_q_<name>`` and its index
#: ``pgqueue_mq_q_<name>_vt``, which must fit PostgreSQL's 63-byte identifiers. It
#: is also pgmq's limit, so a name valid there is valid here.
MAX_NAME_LENGTH = 47

#: The longest name of a queue with a partitioned archive (``mq.partitions``): its
#: partitions, ``pgqueue_mq_a_<name>@<YYYYMMDD>``, must fit the 63 bytes too. The
#: registry's check ``pgqueue_mq_partitioned_name_length`` holds it at both doors.
MAX_PARTITIONED_NAME_LENGTH = 63 - len(ARCHIVE_PREFIX + ARCHIVE_PARTITION_MARK + "YYYYMMDD")
#: The longest archive retention (``pgqueue_mq_archive_retention_range``).
MAX_RETENTION = dt.timedelta(days=100 * 366)

#: Letters, digits, ``_`` and ``-``, starting with a letter or ``_``. The name is
#: always quoted as an identifier; the pattern keeps names readable in table
#: names, channels and URLs.
NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")

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


def check_msg_id(value: object, what: str = "msg_id") -> int:
    """A message id: an int, or a string of ASCII digits, from 1 to the largest bigint
    (an id no row can have would make the statement fail)."""
    return strict_int(value, what, minimum=1, maximum=BIGINT_MAX)


#: The largest read count (``read_ct`` is an ``integer`` column).
INT_MAX = 2**31 - 1


def check_read_cts(read_ct: object, count: int) -> list[int]:
    """The read counts of a fenced archive or delete, one per message id (0 matches a
    message never read); an int, a string of ASCII digits, or a list of them."""
    values = list(read_ct) if isinstance(read_ct, list | tuple) else [read_ct]
    what = "read_ct" if len(values) == 1 else "read_ct[{}]"
    checked = [
        strict_int(v, what.format(n), minimum=0, maximum=INT_MAX) for n, v in enumerate(values)
    ]
    if len(checked) != count:
        raise ValueError(f"{len(checked)} read counts for {count} message ids")
    return checked


def check_delay(
    delay: object, what: str = "delay", maximum: float = MAX_DELAY_SECONDS
) -> tuple[float, dt.datetime | None]:
    """``(seconds, at)`` from seconds from now or an aware datetime (a send's delay,
    a new visibility timeout)."""
    if isinstance(delay, dt.datetime):
        if delay.tzinfo is None:
            raise ValueError(f"{what} must be a timezone-aware datetime, got {delay!r}")
        return 0.0, delay
    return check_seconds(what, delay, maximum), None


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
    # The rules of task arguments and webhook payloads, from the one contract
    # (contract.py): UTF-8 size, PGQUEUE['MAX_JSON_DEPTH'], no NUL and no lone
    # surrogate, each refusal naming the path of the bad value.
    conf = get_settings()
    try:
        return check_json_document(
            value,
            name=what,
            max_bytes=conf.MAX_ARGS_BYTES,
            max_depth=conf.MAX_JSON_DEPTH,
            error=InvalidMessage,
            limit_name="PGQUEUE['MAX_ARGS_BYTES']",
        )
    except PayloadTooLarge as exc:
        raise InvalidMessage(str(exc)) from exc


# -- topic routing ----------------------------------------------------------------------

#: Longest routing key or topic pattern (pgmq's limit).
MAX_TOPIC_LENGTH = 255

#: pgmq's rules for routing keys, in order: (a POSIX regular expression the key must
#: not match, the error). One list for both doors: ``check_routing_key`` applies it in
#: Python and the SQL API's ``validate_routing_key`` is generated from it
#: (``sql_api.py``), so the two cannot drift. The expressions mean the same in Python's
#: ``re`` and PostgreSQL's ``~``.
ROUTING_KEY_RULES = [
    ("[^A-Za-z0-9._-]", "may hold only letters, digits, '.', '_' and '-'"),
    ("^[.]", "cannot start with a dot"),
    ("[.]$", "cannot end with a dot"),
    ("[.][.]", "cannot contain consecutive dots"),
]
#: The rules of topic patterns: those of routing keys with the wildcards ``*`` (exactly
#: one segment) and ``#`` (any run of characters, dots included, as pgmq compiles it),
#: never two wildcards side by side.
TOPIC_PATTERN_RULES = [
    ("[^A-Za-z0-9._*#-]", "may hold only letters, digits, '.', '_', '-', '*' and '#'"),
    *ROUTING_KEY_RULES[1:],
    ("[*#][*#]", "cannot contain adjacent wildcards (**, ##, *# or #*)"),
]


def _check_topic(value: object, what: str, rules: list[tuple[str, str]]) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{what} cannot be empty")
    if len(value) > MAX_TOPIC_LENGTH:
        raise ValueError(
            f"{what} is too long, maximum length is {MAX_TOPIC_LENGTH} characters, got {len(value)}"
        )
    for expression, problem in rules:
        if re.search(expression, value):
            raise ValueError(f"{what} {problem}: {value!r}")
    return value


def check_routing_key(value: object) -> str:
    """A routing key of ``send_topic`` (dot-separated segments, no wildcard)."""
    return _check_topic(value, "routing_key", ROUTING_KEY_RULES)


def check_topic_pattern(value: object) -> str:
    """A pattern of ``bind_topic`` (a routing key that may hold ``*`` and ``#``)."""
    return _check_topic(value, "pattern", TOPIC_PATTERN_RULES)
