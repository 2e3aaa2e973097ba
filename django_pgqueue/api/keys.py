"""API keys: made, hashed, parsed and revoked here (the command and the admin call these).

A key reads ``pgq_<prefix>_<secret>``: ``prefix`` is 12 hex characters, public, and
finds the row; ``secret`` is 43 URL-safe characters (256 random bits). Only the
SHA-256 of the whole key is stored.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from ..authority import OPERATOR_SCOPES, check_grant, check_key_scopes
from ..conf import get_settings
from ..contract import strict_text
from ..models.api import ApiKey, ApiScope
from ..models.webhooks import Application
from ..stored_json import decode

KEY_PREFIX = "pgq_"
PREFIX_LENGTH = 12
SCOPES = tuple(scope.value for scope in ApiScope)
#: The scopes a key bound to an application may hold (``authority.OPERATOR_SCOPES``
#: are the operator's).
CUSTOMER_SCOPES = tuple(scope for scope in SCOPES if scope not in OPERATOR_SCOPES)


def hash_key(key: str) -> str:
    """The stored form of a key: its SHA-256, in hex."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def split_key(key: str) -> str | None:
    """The public prefix of a well-formed key, or None."""
    if (
        len(key) > len(KEY_PREFIX) + PREFIX_LENGTH + 1
        and key.startswith(KEY_PREFIX)
        and key[len(KEY_PREFIX) + PREFIX_LENGTH] == "_"
    ):
        prefix = key[len(KEY_PREFIX) : len(KEY_PREFIX) + PREFIX_LENGTH]
        if all(c in "0123456789abcdef" for c in prefix):
            return prefix
    return None


def check_scopes(scopes: Iterable[str], *, bound: bool = False) -> list[str]:
    """The scopes as a sorted list without repeats; ValueError naming an unknown one,
    or an operator's scope when the key is ``bound`` to an application."""
    result = sorted(set(scopes))
    unknown = [s for s in result if s not in SCOPES]
    if unknown or not result:
        raise ValueError(
            f"Scopes must be one or more of {', '.join(SCOPES)}; got {', '.join(result) or 'none'}"
        )
    check_key_scopes(result, bound=bound)
    return result


def stored_scopes(value: Any, *, bound: bool) -> frozenset[str]:
    """The scopes of a key row read back from the database, held to the rules a key is
    made by (:func:`check_scopes`): anyone with SQL may have written the row. A JSON
    list of known scope names, and no operator's scope on a key ``bound`` to an
    application; ValueError naming what breaks them otherwise. Nothing else grants
    anything: not an object's keys, not a string's letters."""
    value = decode(value)  # StoredJSONNotDecodable is a ValueError too
    if not isinstance(value, list) or not all(isinstance(scope, str) for scope in value):
        raise ValueError(f"they must be a JSON list of scope names, not {json.dumps(value)[:80]}")
    return frozenset(check_scopes(value, bound=bound))


@dataclass(frozen=True)
class NewKey:
    """A key just created: ``key`` is the only time the full key exists."""

    api_key: ApiKey
    key: str


def create_key(
    name: str,
    scopes: Iterable[str],
    *,
    application: Application | str | None = None,
    rate_limit: int | None = None,
    creator: Any = None,
) -> NewKey:
    """Create a key and return it with the full key, which is never stored.

    ``application`` (an Application or its uid) limits the key to that
    application's objects, and to ``CUSTOMER_SCOPES`` (ValueError naming an
    operator's scope). ``LookupError`` when no application has that uid.
    ``creator``: the Django user the key is made for; ValueError naming each scope
    whose permissions they lack (``authority.check_grant``). Without one (the
    ``pgqueue_api_key`` command, run by whoever has the shell) any key is made.
    """
    scope_list = check_scopes(scopes, bound=application is not None)
    if creator is not None:
        check_grant(creator, scope_list)
    if not name or not name.strip():
        raise ValueError("An API key needs a name (who or what uses it)")
    strict_text(name, "name")
    if rate_limit is not None and rate_limit < 1:
        raise ValueError(f"rate_limit must be a positive number of requests, got {rate_limit}")
    alias = get_settings().DATABASE
    if isinstance(application, str):
        strict_text(application, "application")
        found = Application.objects.using(alias).filter(uid=application).first()
        if found is None:
            raise LookupError(f"No application with uid {application!r}")
        application = found
    with transaction.atomic(using=alias):
        api_key = ApiKey(
            name=name.strip(),
            scopes=scope_list,
            application=application,
            rate_limit=rate_limit,
        )
        key = assign_new_key(api_key)
        api_key.save(using=alias)
    return NewKey(api_key, key)


def assign_new_key(api_key: ApiKey) -> str:
    """Give ``api_key`` a fresh prefix and hash (not saved); return the full key."""
    prefix = secrets.token_hex(PREFIX_LENGTH // 2)
    key = f"{KEY_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    api_key.prefix = prefix
    api_key.key_hash = hash_key(key)
    return key


def revoke_keys(prefixes: Iterable[str]) -> int:
    """Revoke the keys with these prefixes (``pgq_<prefix>`` accepted too); how many."""
    cleaned = [strict_text(p, "prefix").removeprefix(KEY_PREFIX).split("_", 1)[0] for p in prefixes]
    return (
        ApiKey.objects.using(get_settings().DATABASE)
        .filter(prefix__in=cleaned, revoked_at__isnull=True)
        .update(revoked_at=timezone.now())
    )
