"""Unique keys: the per-call key a caller names, or the one a call's arguments spell.

A unique key is stored in the job row's ``unique_key`` column, where the partial
unique index ``pgq_job_unique_live`` settles "at most one live job per key"
(docs/unique-tasks.md). Both checks run before any SQL, so a key PostgreSQL could
not store is refused with :class:`~django_pgqueue.exceptions.InvalidUniqueKey`,
never a ``DataError`` in the caller's transaction.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from .compat import Task
from .contract import bounded_text
from .exceptions import InvalidUniqueKey
from .models.queue import UNIQUE_KEY_MAX_LENGTH

__all__ = ["unique_key_for", "validate_unique_key"]


def validate_unique_key(key: Any) -> None:
    """Raise InvalidUniqueKey unless ``key`` is None or a storable key: a non-empty
    string of at most ``UNIQUE_KEY_MAX_LENGTH`` characters that PostgreSQL's
    ``text`` holds (no NUL character, no lone surrogate)."""
    if key is None:
        return
    bounded_text(
        key,
        "unique_key",
        max_length=UNIQUE_KEY_MAX_LENGTH,
        hint=" Hash long keys (e.g. hashlib.sha256(key.encode()).hexdigest()).",
        error=InvalidUniqueKey,
    )


@lru_cache(maxsize=1024)
def _signature(func: Callable[..., Any], takes_context: bool) -> inspect.Signature | None:
    """The parameters a caller passes: a ``takes_context`` task's first one is the
    context the worker supplies; None when Python cannot tell (some C callables).
    Cached: ``inspect.signature`` costs tens of microseconds and a task's function
    never changes."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return None
    if takes_context:
        signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    return signature


def _canonical_call(task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> list[Any]:
    """``[positional values, {name: value}]`` of the call, bound to the task's function
    with its defaults applied, so every spelling of one call is the same document.

    Parameters that can be named are keyed by name (with ``**kwargs`` merged in, whose
    names cannot clash with them); positional-only parameters and ``*args`` stay in
    order. A call the signature refuses is refused here: it could never run.
    """
    signature = _signature(task.func, bool(getattr(task, "takes_context", False)))
    if signature is None:
        return [list(args), dict(kwargs)]  # the call as spelled: nothing to bind to
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise InvalidUniqueKey(
            f"Cannot compute the unique key of {task.module_path}: the arguments do not "
            f"match its signature {signature} ({exc})."
        ) from None
    bound.apply_defaults()
    positional: list[Any] = []
    named: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = bound.signature.parameters[name].kind
        if kind is inspect.Parameter.POSITIONAL_ONLY:
            positional.append(value)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            positional.extend(value)
        elif kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        else:
            named[name] = value
    return [positional, named]


def unique_key_for(task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    """The unique key of one call: the per-call key, else a digest of the arguments
    for ``@task(unique=True)``, else None (not unique).

    The digest is taken over the call bound to the task's signature, defaults
    applied, as canonical JSON (sorted keys): ``f(7)``, ``f(shop_id=7)`` and
    ``f(7, full=False)`` are the same call of ``def f(shop_id, full=False)``. The
    arguments passed the input contract already, so the JSON always encodes.
    """
    key = getattr(task, "unique_key", None)
    if key is not None:
        return str(key)
    if not getattr(task, "unique", False):
        return None
    canonical = json.dumps(
        _canonical_call(task, args, kwargs), sort_keys=True, separators=(",", ":")
    )
    return "args:" + hashlib.sha256(canonical.encode()).hexdigest()
