"""Who receives an event: applications, channels and wildcard event types.

The rules are checked here, in Python, before any SQL; the fan-out
(``sql.RECORD_EVENT``) then matches with plain ``jsonb`` containment:

* an endpoint of an application receives only that application's events; a global
  endpoint (no application) only events sent without one;
* ``event_types`` lists exact types and wildcards: ``order.*`` matches every type
  that starts with ``order.`` (``order.paid``, ``order.refund.failed``). An event of
  type ``a.b.c`` is matched by ``a.b.c``, ``a.*`` and ``a.b.*``: ``wildcards_of``
  gives those, so the statement asks ``event_types ?| array[...]`` (no pattern
  matching in SQL, no scan of the subscriptions);
* an endpoint with ``channels`` receives only events carrying one of them; an
  endpoint without receives every event whatever its channels.
"""

from __future__ import annotations

import re
from typing import Any

#: What an event type may be: a letter or digit, then letters, digits and ``_ . : / -``
#: (``order.paid``, ``invoice:created``, ``orders/create``), 255 characters at most.
EVENT_TYPE_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,254}")
#: An application's uid: the project's own id for a customer, 1 to 255 visible ASCII
#: characters (``cust_42``, a UUID).
APPLICATION_UID_PATTERN = re.compile(r"[!-~]{1,255}")
#: A channel: a letter or digit, then letters, digits and ``_ . : / -``, 128 at most.
CHANNEL_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}")
#: A wildcard subscription: an event type prefix ending at a dot, then ``*``.
WILDCARD_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,252}\.\*")
#: Most channels one event or endpoint may carry.
MAX_CHANNELS = 10


def check_application_uid(uid: Any) -> None:
    """Raise ValueError unless ``uid`` follows ``APPLICATION_UID_PATTERN``."""
    if not isinstance(uid, str) or not APPLICATION_UID_PATTERN.fullmatch(uid):
        raise ValueError(
            f"An application uid must be 1 to 255 visible ASCII characters (no spaces), "
            f"e.g. 'cust_42', got {uid!r}"
        )


def check_channels(channels: Any, name: str = "channels") -> list[str]:
    """The channels as a list of distinct names; ValueError naming the one at fault."""
    if channels is None:
        return []
    if isinstance(channels, str) or not isinstance(channels, list | tuple):
        raise ValueError(f"{name} must be a list of channel names, got {channels!r}")
    if len(channels) > MAX_CHANNELS:
        raise ValueError(f"{name} may hold {MAX_CHANNELS} channels at most, got {len(channels)}")
    for channel in channels:
        if not isinstance(channel, str) or not CHANNEL_PATTERN.fullmatch(channel):
            raise ValueError(
                f"{name}: a channel must be 1 to 128 characters: a letter or digit, then "
                f"letters, digits, '_', '.', ':', '/' or '-' (e.g. 'project-7'), got {channel!r}"
            )
    return list(dict.fromkeys(channels))


def check_subscriptions(event_types: Any) -> None:
    """Raise ValueError unless ``event_types`` is a list of event types and wildcards."""
    if not isinstance(event_types, list):
        raise ValueError(
            "Give a list of event types (or wildcards like 'order.*'), or an empty list for all."
        )
    for item in event_types:
        if not isinstance(item, str) or not (
            EVENT_TYPE_PATTERN.fullmatch(item) or WILDCARD_PATTERN.fullmatch(item)
        ):
            raise ValueError(
                f"{item!r} is not an event type ('order.paid') nor a wildcard ('order.*': "
                f"a prefix ending with '.', then '*')."
            )


def subscription_keys(event_type: str) -> list[str]:
    """What an endpoint's ``event_types`` may hold to receive ``event_type``: the type
    itself and the wildcard of each of its dotted prefixes."""
    keys = [event_type]
    for index, char in enumerate(event_type):
        if char == ".":
            keys.append(event_type[: index + 1] + "*")
    return keys
