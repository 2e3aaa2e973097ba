"""Static guarantees of the package source (catalogue S2, W5, F5).

* no pickle, marshal or shelve import anywhere (only JSON is stored or read);
* every SQL statement gets its values as parameters: no value is formatted into SQL;
* nothing relies on session state that breaks behind a transaction-pooling
  PgBouncer: no session advisory locks, no session ``SET``, LISTEN only on the
  listener's own connection (which ``LISTEN_DSN`` can send around the pooler).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import django_pgqueue

pytestmark = pytest.mark.fault

PACKAGE = Path(django_pgqueue.__file__).parent
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts)

#: Expressions that may be formatted into SQL text: identifiers and fixed fragments only
#: (``set_clause``/``guard`` come from the constant operation declarations in operations.py;
#: ``*_sql`` and ``alias`` are the fixed fragments sql/fragments.py builds statements from).
IDENTIFIER = re.compile(
    r"(^|\.)(_?[A-Z][A-Z0-9_]*|table|[a-z_]*table|set_clause|guard|marker|column|quote_name\(.*\)"
    r"|[a-z_]*_sql|alias|.*_meta\.db_table)$"
)


def _trees() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(), str(path))) for path in SOURCES]


def _strings(tree: ast.Module) -> list[ast.Constant]:
    """String constants that are not docstrings."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def test_sources_were_found():
    assert len(SOURCES) > 20
    assert PACKAGE / "sql" / "jobs.py" in SOURCES


def test_no_pickle_marshal_or_shelve():
    banned = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle"}
    found = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [f"{path}:{node.lineno} {n}" for n in names if n.split(".")[0] in banned]
    assert not found


def _formatted_values(node: ast.AST) -> list[str]:
    return [ast.unparse(v.value) for v in ast.walk(node) if isinstance(v, ast.FormattedValue)]


def test_sql_is_always_parameterised():
    """``execute()`` never receives SQL with values formatted in (f-string, %, +, .format)."""
    problems = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("execute", "executemany", "copy", "raw", "extra")
                and node.args
            ):
                continue
            statement = node.args[0]
            where = f"{path.relative_to(PACKAGE)}:{node.lineno}"
            if isinstance(statement, ast.JoinedStr):
                bad = [v for v in _formatted_values(statement) if not IDENTIFIER.search(v)]
                if bad:
                    problems.append(f"{where} formats {bad} into SQL")
            elif isinstance(statement, ast.BinOp):
                problems.append(f"{where} builds SQL with an operator")
            elif (
                isinstance(statement, ast.Call)
                and isinstance(statement.func, ast.Attribute)
                and statement.func.attr == "format"
                and isinstance(statement.func.value, ast.Constant)
            ):
                problems.append(f"{where} builds SQL with str.format")
    assert not problems, "\n".join(problems)
    # The named statements interpolate only module constants (table names, column lists)
    # and the fixed fragments of sql/fragments.py.
    for path in sorted((PACKAGE / "sql").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                for value in _formatted_values(node):
                    assert IDENTIFIER.search(value), f"{path.name} formats {value!r} into SQL"


#: A whole ``SET name = value`` / ``SET name TO value`` statement (not SET LOCAL, not the
#: SET clause of an UPDATE, which has no statement of its own).
SESSION_SET = re.compile(
    r"^\s*(/\*.*?\*/\s*)?SET\s+(?!LOCAL\b)(SESSION\s+)?[\w.]+\s*(=|\bTO\b)[^,]*;?\s*$", re.S
)
LISTEN = re.compile(r"^\s*(/\*.*?\*/\s*)?(UN)?LISTEN\b", re.I | re.S)


def test_nothing_needs_a_session_behind_a_transaction_pooler():
    problems = []
    for path, tree in _trees():
        rel = path.relative_to(PACKAGE)
        for node in _strings(tree):
            text = node.value
            if re.search(r"pg_(try_)?advisory_(un)?lock(_shared)?\s*\(", text):
                problems.append(f"{rel}:{node.lineno} session advisory lock")
            if re.search(r"set_config\s*\([^)]*false\s*\)", text, re.I):
                problems.append(f"{rel}:{node.lineno} session set_config")
            if SESSION_SET.search(text):
                problems.append(f"{rel}:{node.lineno} session SET: {text.strip()[:40]!r}")
            if LISTEN.search(text) and rel not in (
                Path("worker/listener.py"),
                Path("mq/wakeup.py"),  # read_with_poll's listener, also through LISTEN_DSN
                Path("bench/pickup.py"),  # the benchmark's raw reference consumer
            ):
                problems.append(f"{rel}:{node.lineno} LISTEN outside the listener")
    assert not problems, "\n".join(problems)
    listener = (PACKAGE / "worker" / "listener.py").read_text()
    assert "dsn=self.dsn" in listener  # the listener connects through LISTEN_DSN
    worker = (PACKAGE / "worker" / "worker.py").read_text()
    assert "dsn=conf.LISTEN_DSN" in worker
    assert "dsn=get_settings().LISTEN_DSN" in (PACKAGE / "mq" / "wakeup.py").read_text()
