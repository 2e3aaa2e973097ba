"""The limits of a job queue, checked once for every door (flow control).

A leaf module (it imports only ``contract``): ``queues.configure`` checks a call's
limits with it and ``conf`` checks ``PGQUEUE["QUEUES"]`` with it, so a limit the
settings refuse is the limit the API, the command and Python refuse, with the
same words.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .contract import bounded_text, strict_int

#: Longest queue name (``Job.queue_name``'s length).
QUEUE_NAME_MAX_LENGTH = 100
#: Longest concurrency key.
CONCURRENCY_KEY_MAX_LENGTH = 200
#: Largest limit or rate period accepted (PostgreSQL ``integer``).
INT_MAX = 2**31 - 1


@dataclasses.dataclass(frozen=True, slots=True)
class QueueLimits:
    """What a queue's configuration holds. None: no such limit.

    ``concurrency``: most jobs of the queue running at once, across every worker
    and host; ``key_concurrency``: most running at once per concurrency key;
    ``rate_limit``: most jobs started per ``rate_period`` seconds in the queue;
    ``key_rate_limit``: most started per ``key_rate_period`` seconds per key
    (both GCRA, as for webhook endpoints).
    """

    concurrency: int | None = None
    key_concurrency: int | None = None
    rate_limit: int | None = None
    rate_period: int = 1
    key_rate_limit: int | None = None
    key_rate_period: int = 1

    def as_dict(self) -> dict[str, int | None]:
        return dataclasses.asdict(self)


#: The names of the limits, in the order the docs, the API and the command show them.
LIMIT_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(QueueLimits))
_PERIODS = ("rate_period", "key_rate_period")


def limits(values: Mapping[str, Any], *, where: str = "") -> QueueLimits:
    """``values`` (a subset of LIMIT_FIELDS) checked: each limit None or a whole number
    from 1 to 2147483647, each period (seconds) a whole number in that range. Unknown
    keys and bad values raise ValueError naming ``where`` and the key."""
    unknown = sorted(set(values) - set(LIMIT_FIELDS), key=str)
    if unknown:
        raise ValueError(
            f"{where}unknown limit(s) {', '.join(map(repr, unknown))}; "
            f"the limits are {', '.join(LIMIT_FIELDS)}"
        )
    checked: dict[str, Any] = {}
    for name, value in values.items():
        if value is None and name not in _PERIODS:
            checked[name] = None
            continue
        what = f"{where}{name}" + (" (seconds)" if name in _PERIODS else "")
        checked[name] = strict_int(value, what, minimum=1, maximum=INT_MAX)
    return QueueLimits(**checked)


def queue_name(name: Any, *, where: str = "") -> str:
    """``name`` if it can name a queue: a non-empty string of at most 100 characters
    that PostgreSQL's ``text`` holds; ValueError naming it otherwise."""
    return bounded_text(name, f"{where}A queue name", max_length=QUEUE_NAME_MAX_LENGTH)
