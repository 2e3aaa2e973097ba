"""The per-row work of a bulk enqueue (``enqueue_many``), done once where it can be.

A bulk enqueue of 10,000 calls spent most of its time in Python, not in
PostgreSQL: each call's arguments were checked and serialised, each row was
adapted value by value for COPY, and each result was built through the Tasks
framework's constructor (which normalises its arguments again). Bulk calls are
mostly the same arguments many times, or a few different ones; so the calls are
kept as *runs*, consecutive calls with the same arguments:

* in a list or tuple of calls, a call whose ``args`` and ``kwargs`` are the very
  objects of the call before it (``[((), {})] * n``) holds the same values (a list
  cannot change while it is read), so it joins that call's run and reuses its
  checked JSON: the input contract (``contract.py``) has just accepted it. Calls
  from any other iterable are each checked on their own, because a generator may
  hand out one object again with other contents;
* COPY data is built per run at C speed: the run's row tail (its arguments and
  the columns every row shares) formatted once, joined between its ids;
* the rows after a run's first get results copied from the first one's, with their
  own id and their own (fresh, unshared) argument lists; a caller who only needs
  the job ids (``enqueue_many(..., results=False)``) gets no results built at all.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from .compat import TaskResult

#: Rows per piece of COPY data (bounds the memory of one very large batch).
COPY_CHUNK = 10_000


@dataclasses.dataclass(slots=True)
class Run:
    """Consecutive calls of a bulk enqueue with the same, already checked, arguments.

    ``start`` is the position of its first call, ``count`` how many calls it holds;
    ``args``/``kwargs`` are that first call's (copied into a tuple and a dict, so
    an iterator is read once).
    """

    start: int
    count: int
    args_json: str
    kwargs_json: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


_UNSET = object()


def encode_calls(
    arguments: Iterable[tuple[Sequence[Any], dict[str, Any]]],
    serialize: Callable[[tuple[Any, ...], dict[str, Any], int], tuple[str, str]],
) -> list[Run]:
    """Check and serialise every call with ``serialize(args, kwargs, item)``, before any SQL.

    Returns the calls as runs, in order. Only in a list or tuple does a call with
    the argument objects of the call before it join that call's run unchecked
    (the objects are held, so their identity cannot be reused meanwhile).
    """
    runs: list[Run] = []
    if isinstance(arguments, list | tuple):
        last_args: Any = _UNSET
        last_kwargs: Any = _UNSET
        for item, (args, kwargs) in enumerate(arguments):
            if args is last_args and kwargs is last_kwargs:
                continue
            last_args, last_kwargs = args, kwargs
            runs.append(_new_run(item, args, kwargs, serialize))
        total = len(arguments)
    else:
        total = 0
        for item, (args, kwargs) in enumerate(arguments):
            runs.append(_new_run(item, args, kwargs, serialize))
            total = item + 1
    for run, after in itertools.pairwise(runs):
        run.count = after.start - run.start
    if runs:
        runs[-1].count = total - runs[-1].start
    return runs


def _new_run(
    item: int,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    serialize: Callable[[tuple[Any, ...], dict[str, Any], int], tuple[str, str]],
) -> Run:
    call_args, call_kwargs = tuple(args), dict(kwargs)
    args_json, kwargs_json = serialize(call_args, call_kwargs, item)
    return Run(item, 1, args_json, kwargs_json, call_args, call_kwargs)


def count_of(runs: Sequence[Run]) -> int:
    """How many calls ``runs`` hold."""
    return runs[-1].start + runs[-1].count if runs else 0


def insert_arrays(runs: Sequence[Run]) -> tuple[list[str], list[str]]:
    """Every call's ``args`` and ``kwargs`` JSON, in order (for ``sql.INSERT_JOBS``)."""
    args: list[str] = []
    kwargs: list[str] = []
    for run in runs:
        args += [run.args_json] * run.count
        kwargs += [run.kwargs_json] * run.count
    return args, kwargs


def copy_field(text: str) -> str:
    """``text`` as one field of COPY's text format (backslash, tab and newlines escaped)."""
    if "\\" in text:
        text = text.replace("\\", "\\\\")
    if "\t" in text or "\n" in text or "\r" in text:
        text = text.replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return text


def copy_chunks(ids: Sequence[int], runs: Sequence[Run], shared: Sequence[object]) -> Iterator[str]:
    """COPY text data for ``sql.COPY_JOBS``: per row its id and arguments, then ``shared``.

    A run's rows differ only in their ids, so its row tail is formatted once and
    joined between them (``str.join``, at C speed). JSON from the contract holds
    no tab or newline (it escapes control characters) but may hold backslashes,
    which COPY's text format doubles. Pieces of about ``COPY_CHUNK`` rows.
    """
    tail = "\t".join(copy_field(str(value)) for value in shared)
    pieces: list[str] = []
    rows = 0
    for run in runs:
        suffix = f"\t{copy_field(run.args_json)}\t{copy_field(run.kwargs_json)}\t{tail}\n"
        end = run.start + run.count
        for start in range(run.start, end, COPY_CHUNK):
            part = ids[start : min(start + COPY_CHUNK, end)]
            pieces.append(suffix.join(map(str, part)))
            pieces.append(suffix)
            rows += len(part)
            if rows >= COPY_CHUNK:
                yield "".join(pieces)
                pieces, rows = [], 0
    if pieces:
        yield "".join(pieces)


_FIELDS = tuple(f.name for f in dataclasses.fields(TaskResult))
#: Fields results_for sets per row.
_PER_ROW = frozenset({"id", "enqueued_at", "args", "kwargs"})


def _setter(name: str) -> Callable[[TaskResult, Any], None]:
    """Set field ``name`` of a (frozen) TaskResult: its slot's own setter when it has one."""
    slot = TaskResult.__dict__.get(name)
    if slot is not None and hasattr(slot, "__set__"):
        return slot.__set__
    return lambda result, value: object.__setattr__(result, name, value)


_SETTERS = {name: _setter(name) for name in _FIELDS}


def results_for(
    runs: Sequence[Run],
    ids: Sequence[int],
    enqueued_at: datetime,
    new_result: Callable[[tuple[Any, ...], dict[str, Any]], TaskResult],
) -> list[TaskResult]:
    """One READY result per call, in order, with its job id and enqueue time.

    The first call of each run gets its result from ``new_result`` (the
    framework's constructor); the calls after it get a copy with their own
    ``args`` and ``kwargs``: decoded again from the stored JSON when that gives
    the same values (most arguments), deep-copied otherwise. No two results share
    a mutable list or dict.
    """
    with no_cycle_collection():
        return _results_for(runs, ids, enqueued_at, new_result)


@contextlib.contextmanager
def no_cycle_collection() -> Iterator[None]:
    """Hold off Python's cyclic garbage collector while a batch builds its objects.

    Each result holds four new lists and dicts; 10,000 results made the collector
    run its young generations hundreds of times and the whole heap a few times,
    which took twice as long as building them. Nothing built here holds a cycle,
    and reference counting frees everything as usual; the collector is back on
    (if it was on) right after.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _results_for(
    runs: Sequence[Run],
    ids: Sequence[int],
    enqueued_at: datetime,
    new_result: Callable[[tuple[Any, ...], dict[str, Any]], TaskResult],
) -> list[TaskResult]:
    results: list[TaskResult] = []
    append = results.append
    new = object.__new__
    set_id, set_enqueued_at = _SETTERS["id"], _SETTERS["enqueued_at"]
    set_args, set_kwargs = _SETTERS["args"], _SETTERS["kwargs"]
    for run in runs:
        made = new_result(run.args, run.kwargs)
        set_id(made, str(ids[run.start]))
        set_enqueued_at(made, enqueued_at)
        append(made)
        if run.count == 1:
            continue
        values = [(_SETTERS[name], getattr(made, name)) for name in _FIELDS if name not in _PER_ROW]
        # errors and worker_ids: empty lists, but each result gets its own.
        shared = [(s, v) for s, v in values if not isinstance(v, list | dict)]
        own = [(s, v) for s, v in values if isinstance(v, list | dict)]
        fresh = _fresh_arguments(made, run.args_json, run.kwargs_json)
        for job_id in ids[run.start + 1 : run.start + run.count]:
            result = new(TaskResult)
            for set_field, value in shared:
                set_field(result, value)
            for set_field, value in own:
                set_field(result, value.copy())
            args, kwargs = fresh()
            set_args(result, args)
            set_kwargs(result, kwargs)
            set_id(result, str(job_id))
            set_enqueued_at(result, enqueued_at)
            append(result)
    return results


def _fresh_arguments(
    result: TaskResult, args_json: str, kwargs_json: str
) -> Callable[[], tuple[Any, Any]]:
    """A function returning new, equal copies of ``result``'s args and kwargs."""
    if args_json == "[]" and kwargs_json == "{}":
        return lambda: ([], {})
    if json.loads(args_json) == result.args and json.loads(kwargs_json) == result.kwargs:
        return lambda: (json.loads(args_json), json.loads(kwargs_json))
    args, kwargs = result.args, result.kwargs
    return lambda: (copy.deepcopy(args), copy.deepcopy(kwargs))
