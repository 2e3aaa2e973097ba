"""Every state change has one home (docs/architecture.md, "State changes: the stores").

The worker's sources and the tracing wrappers run no SQL of their own: they call the
store of their queue kind. The admin and the portal write no rows of their own: they
call ``operations.py``, the stores or the API's key functions. Checked on the source
text, so a new writer in the wrong place fails here rather than in review.
"""

from __future__ import annotations

import ast
from pathlib import Path

import django_pgqueue

PACKAGE = Path(django_pgqueue.__file__).parent

#: Modules that call a store and must not run statements themselves.
NO_SQL = [
    "worker/sources.py",
    "webhooks/delivery_source.py",
    "mq/source.py",
    "tracing.py",
]
#: Packages whose views and actions call the operations and must not write rows.
NO_WRITES = ["admin", "portal"]
#: Writers allowed there, with why: none of them writes a row of ours.
WRITERS_ALLOWED = {
    # Django's own LogEntry: the admin's record of what an operator did.
    "admin/audit.py",
}

SQL_CALLS = {"execute", "executemany", "copy"}
#: QuerySet and Model writes (``update_or_create``, ``bulk_update``... included).
WRITE_CALLS = {"update", "bulk_update", "bulk_create", "update_or_create", "raw", *SQL_CALLS}


def _calls(path: Path, names: set[str]) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        f"{path.relative_to(PACKAGE)}:{node.lineno} .{node.func.attr}()"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in names
    ]


def test_sources_and_tracing_run_no_sql_of_their_own():
    found = [call for module in NO_SQL for call in _calls(PACKAGE / module, SQL_CALLS)]
    assert not found, "\n".join(found)


def test_the_admin_and_the_portal_write_no_rows_of_their_own():
    paths = sorted(
        p
        for package in NO_WRITES
        for p in (PACKAGE / package).rglob("*.py")
        if str(p.relative_to(PACKAGE)) not in WRITERS_ALLOWED
    )
    assert len(paths) > 5
    found = [call for path in paths for call in _calls(path, WRITE_CALLS)]
    assert not found, "\n".join(found)
