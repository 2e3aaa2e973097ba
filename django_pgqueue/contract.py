"""The input contract: what may be stored as a JSON document, checked before any SQL.

Job arguments and webhook payloads come from application code and often carry user
data. PostgreSQL's ``jsonb`` refuses some of what ``json.dumps`` writes (``\\u0000``,
lone surrogates) and Python refuses to encode lone surrogates as UTF-8; a value that
fails there fails *inside* the caller's transaction, after SQL has run, and aborts
it. So every door that stores a document (``enqueue``, ``aenqueue``,
``enqueue_many``, ``send_event``) calls :func:`check_json_document` first: it
serialises the value once and refuses, with an error naming the argument and the
path inside it, anything that could not be stored and read back exactly:

* a value that is not JSON (a set, bytes, a model instance, NaN, infinity);
* a NUL character or a lone surrogate in any string or key;
* a document nested deeper than ``max_depth`` lists and dicts;
* a document of more than ``max_bytes`` bytes of UTF-8.

The common case costs one ``json.dumps`` plus a few scans of its text at C speed;
the value is walked in Python only when one of those scans says it may be at fault,
to find and name the culprit.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Iterator, Sequence
from typing import Any

from .exceptions import ArgumentsNotJSON, PayloadTooLarge

#: A JSON string literal in ``json.dumps`` output (the unrolled-loop form: linear,
#: no backtracking on long strings).
_STRING_LITERAL = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
#: What is left of compact JSON text without its strings, brackets made one kind:
#: every character but the brackets is dropped.
_BRACKETS_ONLY = str.maketrans("{}", "[]", "0123456789+-.eE,:truefalsn \n")


def utf8_size(text: str) -> int:
    """Bytes of ``text`` in UTF-8 (``len`` for ASCII, which most JSON is)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def check_json_document(
    value: Any,
    *,
    name: str,
    max_bytes: int,
    max_depth: int,
    ensure_ascii: bool = False,
    context: str = "",
    error: type[Exception] = ArgumentsNotJSON,
    limit_name: str = "",
) -> str:
    """Serialise ``value`` to compact JSON text that PostgreSQL's ``jsonb`` stores exactly.

    ``name`` is the document's root as paths are written in messages (``"args"``,
    ``"kwargs"``, ``"payload"``); ``context`` starts every message (``"Cannot enqueue
    app.tasks.send"``). Raises ``error`` for a value that is not storable JSON and
    ``PayloadTooLarge`` above ``max_bytes`` (UTF-8; ``limit_name`` is the setting
    the message names), before anything is written.
    With ``ensure_ascii`` the text is pure ASCII (``\\uXXXX`` escapes), so its bytes
    never depend on an encoding: webhook bodies are signed as sent.
    """
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=ensure_ascii)
    except (TypeError, ValueError, RecursionError) as exc:
        _refuse(value, name, max_depth, context, error, cause=exc)
    if text.isascii():
        size = len(text)
        # ensure_ascii writes a surrogate as an escape, which jsonb refuses unpaired.
        suspect = "\\u0000" in text or (ensure_ascii and "\\ud" in text)
    else:
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            size, suspect = 0, True  # a lone surrogate: found and named below
        else:
            suspect = "\\u0000" in text
    # A false alarm (the six characters "\u0000" typed in a string) walks and passes.
    if suspect:
        _refuse(value, name, max_depth, context, error, only_if_found=True)
    if size > max_bytes:
        raise PayloadTooLarge(
            f"{_prefix(context)}{size} bytes of JSON (UTF-8) in {_subject(name, ())}, "
            f"more than the limit of {max_bytes}{f' ({limit_name})' if limit_name else ''}. "
            f"Store large data elsewhere and pass a reference."
        )
    # Every level opens a bracket, so a text with few brackets is shallow enough.
    if text.count("[") + text.count("{") > max_depth and json_depth(text) > max_depth:
        _refuse(value, name, max_depth, context, error)
    return text


#: The setting that bounds a call's arguments, as messages name it.
ARGS_LIMIT_NAME = "PGQUEUE['MAX_ARGS_BYTES']"


def check_arguments(
    args: Sequence[Any], kwargs: dict[str, Any], *, max_bytes: int, max_depth: int, context: str
) -> tuple[str, str]:
    """A call's arguments as (args JSON, kwargs JSON), both documents under the contract
    and their sum within ``max_bytes`` (``PGQUEUE["MAX_ARGS_BYTES"]``).

    Every enqueue checks its arguments here, and so does every schedule when it is
    declared, so a schedule can never hold arguments its ticks could not enqueue.
    """
    args_json = check_json_document(
        list(args),
        name="args",
        max_bytes=max_bytes,
        max_depth=max_depth,
        context=context,
        limit_name=ARGS_LIMIT_NAME,
    )
    kwargs_json = check_json_document(
        kwargs,
        name="kwargs",
        max_bytes=max_bytes,
        max_depth=max_depth,
        context=context,
        limit_name=ARGS_LIMIT_NAME,
    )
    size = utf8_size(args_json) + utf8_size(kwargs_json)
    if size > max_bytes:
        raise PayloadTooLarge(
            f"{_prefix(context)}its arguments take {size} bytes as JSON (UTF-8), more than "
            f"{ARGS_LIMIT_NAME} = {max_bytes}. Store large data elsewhere and pass "
            f"a reference."
        )
    return args_json, kwargs_json


def json_depth(text: str) -> int:
    """How deeply lists and objects nest in the JSON ``text`` (0 for a scalar).

    Strings are dropped, brackets kept, and innermost pairs removed one level per
    pass: each pass is a C-speed ``str.replace``, so this costs a few scans of the
    text for the depths real documents have.
    """
    brackets = _STRING_LITERAL.sub("", text).translate(_BRACKETS_ONLY)
    depth = 0
    while brackets:
        brackets = brackets.replace("[]", "")
        depth += 1
    return depth


def format_path(name: str, path: tuple[Any, ...]) -> str:
    """``kwargs['user']['tags'][3]``: where a value sits in a document.

    A very deep path keeps its first and last steps around a count of the others.
    """
    steps = [f"[{step!r}]" for step in path]
    if len(steps) > 12:
        steps[8:-2] = [f"[...{len(steps) - 10} more...]"]
    return name + "".join(steps)


def _prefix(context: str) -> str:
    return f"{context}: " if context else ""


def _subject(name: str, path: tuple[Any, ...]) -> str:
    """What the caller passed that is at fault: the argument, not the whole document."""
    if name == "args" and path:
        return f"positional argument {path[0]}"
    if name == "kwargs" and path:
        return f"keyword argument {path[0]!r}"
    if name == "args":
        return "the positional arguments"
    if name == "kwargs":
        return "the keyword arguments"
    return f"the {name}"


def _refuse(
    value: Any,
    name: str,
    max_depth: int,
    context: str,
    error: type[Exception],
    *,
    cause: BaseException | None = None,
    only_if_found: bool = False,
) -> None:
    """Raise ``error`` naming the first fault in ``value`` (document order)."""
    for path, problem in _faults(value, max_depth):
        where = format_path(name, path)
        subject = _subject(name, path)
        if problem.startswith("is nested"):
            verb = "is nested too deeply"
            fix = (
                f"PGQUEUE['MAX_JSON_DEPTH'] allows {max_depth} levels of lists and dicts; "
                "flatten the data or store it elsewhere and pass a reference."
            )
        elif problem.startswith(("holds", "has a key holding")):
            verb = "cannot be stored"
            fix = (
                "PostgreSQL cannot store NUL characters or unpaired surrogates in JSON; "
                "clean the text first, or send binary data base64-encoded."
            )
        else:
            verb = "is not JSON-serialisable"
            fix = (
                "Pass JSON types only (str, int, float, bool, None, list, dict with str "
                "keys), e.g. an id instead of a model instance."
            )
        raise error(f"{_prefix(context)}{subject} {verb}: {where} {problem}. {fix}") from cause
    if only_if_found:
        return
    raise error(
        f"{_prefix(context)}{_subject(name, ())} cannot be stored as JSON ({cause!r})"
    ) from cause


def _faults(value: Any, max_depth: int) -> Iterator[tuple[tuple[Any, ...], str]]:
    """Each (path, problem) in ``value``, in document order; iterative, so any depth."""
    stack: list[tuple[Any, tuple[Any, ...], int]] = [(value, (), 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            problem = _string_problem(item)
            if problem:
                yield path, f"holds {problem}"
        elif item is None or isinstance(item, bool):
            continue
        elif isinstance(item, int):
            try:
                int.__repr__(item)  # what json.dumps writes
            except ValueError:
                yield path, "is an integer too long to write as JSON"
        elif isinstance(item, float):
            if not math.isfinite(item):
                yield path, f"is {item!r}, which JSON cannot represent"
        elif isinstance(item, list | tuple | dict):
            if depth + 1 > max_depth:
                yield path, f"is nested {depth + 1} levels deep, more than {max_depth}"
                continue
            if isinstance(item, dict):
                children: list[tuple[Any, tuple[Any, ...], int]] = []
                for key, child in item.items():
                    if isinstance(key, str):
                        problem = _string_problem(key)
                        if problem:
                            yield path, f"has a key holding {problem} ({key!r})"
                    elif isinstance(key, float) and not math.isfinite(key):
                        # json.dumps writes a float key as text, but refuses NaN and
                        # infinity there too (allow_nan=False).
                        yield path, f"has the key {key!r}, which JSON cannot represent"
                    elif not (key is None or isinstance(key, int | float)):
                        yield path, f"has a key of type {type(key).__name__} ({key!r})"
                    children.append((child, (*path, key), depth + 1))
            else:
                children = [(child, (*path, i), depth + 1) for i, child in enumerate(item)]
            stack.extend(reversed(children))
        else:
            yield path, f"is a {type(item).__module__}.{type(item).__qualname__}"


def _string_problem(text: str) -> str:
    if "\x00" in text:
        return f"a NUL character (\\x00) at position {text.index(chr(0))}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate ({text[exc.start]!r}) at position {exc.start}"
    return ""


#: The range of PostgreSQL's ``bigint``: an id outside it names no row, and would make
#: the statement fail instead of finding nothing.
BIGINT_MIN = -(2**63)
BIGINT_MAX = 2**63 - 1
#: A whole number in ASCII digits. Python's own tests are too lenient for input that
#: reaches SQL: ``"²".isdigit()`` is true, and ``int()`` takes ``" 1_0 "`` and
#: other scripts' digits (``int("٣") == 3``).
_ASCII_INTEGER = re.compile(r"-?[0-9]{1,19}")


def strict_int(
    value: object,
    what: str,
    *,
    minimum: int = BIGINT_MIN,
    maximum: int = BIGINT_MAX,
    error: type[Exception] = ValueError,
) -> int:
    """An integer from code, a URL, a form field or a command line, checked before SQL.

    Takes an ``int`` (not a bool) or a string of ASCII digits with an optional
    leading ``-``, within ``[minimum, maximum]`` (``bigint`` by default); raises
    ``error`` naming ``what`` and the bad value otherwise.
    """
    if isinstance(value, str):
        if not _ASCII_INTEGER.fullmatch(value):
            raise error(f"{what} must be a whole number in ASCII digits, got {value[:40]!r}")
        number = int(value)
    elif isinstance(value, bool):
        raise error(f"{what} must be an integer, got {value!r}")
    else:
        try:
            number = operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            raise error(
                f"{what} must be an integer, got {type(value).__name__} {repr(value)[:40]}"
            ) from None
    if not minimum <= number <= maximum:
        shown = (
            str(number)
            if number.bit_length() < 128
            else f"an integer of {number.bit_length()} bits"
        )
        raise error(f"{what} must be between {minimum} and {maximum}, got {shown}")
    return number


def strict_text(value: str, what: str, *, error: type[Exception] = ValueError) -> str:
    """``value`` unchanged if PostgreSQL can store it as text (no NUL character, no lone
    surrogate): a URL's path or query value, a form field, a command argument, checked
    before SQL. Raises ``error`` naming ``what`` otherwise."""
    problem = _string_problem(value)
    if problem:
        raise error(f"{what} contains {problem}")
    return value


def bounded_text(
    value: object,
    what: str,
    *,
    max_length: int,
    hint: str = "",
    error: type[Exception] = ValueError,
) -> str:
    """``value`` if it is a non-empty string of at most ``max_length`` characters that
    PostgreSQL's ``text`` holds (a name or a key: a queue name, a unique or
    concurrency key); raises ``error`` naming ``what`` (and ``hint``, the fix for a
    long value) otherwise."""
    if not isinstance(value, str) or not value:
        raise error(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > max_length:
        raise error(
            f"{what} is {len(value)} characters long, more than the {max_length} "
            f"allowed: {value[:40]!r}...{hint}"
        )
    return strict_text(value, f"{what} {value[:40]!r}", error=error)
