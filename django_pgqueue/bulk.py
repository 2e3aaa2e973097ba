"""The per-row work of a bulk enqueue (``enqueue_many``), done once where it can be.

A bulk enqueue of 10,000 calls spent most of its time in Python, not in
PostgreSQL: each call's arguments were checked and serialised, each row was
adapted value by value for COPY, and each result was built through the Tasks
framework's constructor (which normalises its arguments again). Bulk calls are
mostly the same arguments many times, or a few different ones; so:

* a call whose ``args`` and ``kwargs`` are the very objects of the call before it
  (``[((), {})] * n``) reuses that call's checked JSON: it is the same document,
  and the input contract (``contract.py``) has just accepted it;
* COPY rows are text lines, the columns every row shares formatted once per batch;
* a result is a copy of its call's first result, with its own id and its own
  (fresh, unshared) argument lists.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from .compat import TaskResult

#: Rows per piece of COPY data (bounds the memory of one very large batch).
COPY_CHUNK = 10_000


@dataclasses.dataclass(slots=True)
class Calls:
    """The calls of a bulk enqueue, checked and serialised, in order.

    ``encoded[i]`` is call ``i``'s ``(args_json, kwargs_json)``; ``first[i]`` is the
    index of the first call with the same argument objects (``i`` itself when they
    are new), whose ``args``/``kwargs`` (copied into a tuple and a dict, so an
    iterator is read once) are in ``calls``.
    """

    encoded: list[tuple[str, str]]
    first: list[int]
    calls: dict[int, tuple[tuple[Any, ...], dict[str, Any]]]


def encode_calls(
    arguments: Iterable[tuple[Sequence[Any], dict[str, Any]]],
    serialize: Callable[[tuple[Any, ...], dict[str, Any], int], tuple[str, str]],
) -> Calls:
    """Check and serialise every call with ``serialize(args, kwargs, item)``, before any SQL.

    A call whose argument objects are those of the call before it is not serialised
    again (the objects are held, so their identity cannot be reused meanwhile).
    """
    encoded: list[tuple[str, str]] = []
    first: list[int] = []
    calls: dict[int, tuple[tuple[Any, ...], dict[str, Any]]] = {}
    last_args: Any = None
    last_kwargs: Any = None
    for item, (args, kwargs) in enumerate(arguments):
        if item and args is last_args and kwargs is last_kwargs:
            encoded.append(encoded[-1])
            first.append(first[-1])
            continue
        last_args, last_kwargs = args, kwargs
        call = (tuple(args), dict(kwargs))
        encoded.append(serialize(*call, item))
        first.append(item)
        calls[item] = call
    return Calls(encoded, first, calls)


def copy_field(text: str) -> str:
    """``text`` as one field of COPY's text format (backslash, tab and newlines escaped)."""
    if "\\" in text:
        text = text.replace("\\", "\\\\")
    if "\t" in text or "\n" in text or "\r" in text:
        text = text.replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return text


def copy_chunks(
    ids: Sequence[int], encoded: Sequence[tuple[str, str]], shared: Sequence[object]
) -> Iterator[str]:
    """COPY text data for ``sql.COPY_JOBS``: per row its id and arguments, then ``shared``.

    JSON from the contract holds no tab or newline (it escapes control characters)
    but may hold backslashes, which COPY's text format doubles.
    """
    tail = "\t".join(copy_field(str(value)) for value in shared)
    escaped: dict[str, str] = {}
    for start in range(0, len(ids), COPY_CHUNK):
        lines = []
        for job_id, (args_json, kwargs_json) in zip(
            ids[start : start + COPY_CHUNK], encoded[start : start + COPY_CHUNK], strict=True
        ):
            a = escaped.get(args_json)
            if a is None:
                a = escaped.setdefault(args_json, copy_field(args_json))
            k = escaped.get(kwargs_json)
            if k is None:
                k = escaped.setdefault(kwargs_json, copy_field(kwargs_json))
            lines.append(f"{job_id}\t{a}\t{k}\t{tail}\n")
        yield "".join(lines)


_FIELDS = tuple(f.name for f in dataclasses.fields(TaskResult))


def results_for(
    calls: Calls,
    ids: Sequence[int],
    enqueued_at: datetime,
    new_result: Callable[[tuple[Any, ...], dict[str, Any]], TaskResult],
) -> list[TaskResult]:
    """One READY result per call, in order, with its job id and enqueue time.

    The first call of each argument objects gets its result from ``new_result``
    (the framework's constructor); the calls after it get a copy with their own
    ``args`` and ``kwargs``: decoded again from the stored JSON when that gives
    the same values (most arguments), deep-copied otherwise. No two results share
    a mutable list or dict.
    """
    results: list[TaskResult] = []
    set_field = object.__setattr__
    shared: list[tuple[str, Any]] = []
    own: list[tuple[str, Any]] = []
    fresh: Callable[[], tuple[Any, Any]] = _no_call_yet
    for item, (job_id, first) in enumerate(zip(ids, calls.first, strict=True)):
        if first == item:
            made = new_result(*calls.calls[item])
            values = [(name, getattr(made, name)) for name in _FIELDS if name not in _PER_ROW]
            # errors and worker_ids: empty lists, but each result gets its own.
            shared = [(n, v) for n, v in values if not isinstance(v, list | dict)]
            own = [(n, v) for n, v in values if isinstance(v, list | dict)]
            fresh = _fresh_arguments(made, calls.encoded[item])
        else:
            made = object.__new__(TaskResult)
            for name, value in shared:
                set_field(made, name, value)
            for name, value in own:
                set_field(made, name, value.copy())
            args, kwargs = fresh()
            set_field(made, "args", args)
            set_field(made, "kwargs", kwargs)
        set_field(made, "id", str(job_id))
        set_field(made, "enqueued_at", enqueued_at)
        results.append(made)
    return results


def _no_call_yet() -> tuple[Any, Any]:  # a placeholder, never called
    raise AssertionError("the first call of a batch always makes its own result")


#: Fields results_for sets per row.
_PER_ROW = frozenset({"id", "enqueued_at", "args", "kwargs"})


def _fresh_arguments(result: TaskResult, encoded: tuple[str, str]) -> Callable[[], tuple[Any, Any]]:
    """A function returning new, equal copies of ``result``'s args and kwargs."""
    args_json, kwargs_json = encoded
    if args_json == "[]" and kwargs_json == "{}":
        return lambda: ([], {})
    if json.loads(args_json) == result.args and json.loads(kwargs_json) == result.kwargs:
        return lambda: (json.loads(args_json), json.loads(kwargs_json))
    args, kwargs = result.args, result.kwargs
    return lambda: (copy.deepcopy(args), copy.deepcopy(kwargs))
