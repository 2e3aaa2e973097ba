"""Every write of a queue table has one home (docs/architecture.md, "State changes:
the stores").

Every module of the package is read with ``ast`` and each write of a queue row is
found: an ORM write on a queue model (``save``, ``create``, ``update``, ``delete``,
``bulk_*``, ``get_or_create``, ``update_or_create``), and a statement that
inserts, updates, deletes or copies into a queue table, whether it is named in
``sql/`` (``sql.CLAIM_JOBS``) or written inline. A write outside the stores fails
here rather than in review. Checked on the source text, so a new writer in the
wrong place fails at once.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import django_pgqueue
from django_pgqueue import sql

PACKAGE = Path(django_pgqueue.__file__).parent
DOC = PACKAGE.parent / "docs" / "architecture.md"

#: The queue models and their tables: the rows the stores own.
QUEUE_MODELS = {
    "Job": "pgqueue_job",
    "JobHistory": "pgqueue_job_history",
    "Application": "pgqueue_application",
    "Endpoint": "pgqueue_endpoint",
    "Event": "pgqueue_event",
    "Delivery": "pgqueue_delivery",
    "DeliveryAttempt": "pgqueue_delivery_attempt",
    "Schedule": "pgqueue_schedule",
    "ScheduleTick": "pgqueue_schedule_tick",
    "MessageQueue": "pgqueue_mq_queue",
    "TopicBinding": "pgqueue_mq_topic_binding",
    "Queue": "pgqueue_queue",
    "Rollup": "pgqueue_rollup",
    "QueueKeyRate": "pgqueue_queue_key_rate",
    "Workflow": "pgqueue_workflow",
    "WorkflowEdge": "pgqueue_workflow_edge",
}
QUEUE_TABLES = set(QUEUE_MODELS.values())

#: The stores: module (or package, ending in "/") -> the tables it writes. The
#: same list as the table in docs/architecture.md (test_the_page_lists_the_stores).
STORES: dict[str, set[str]] = {
    "jobs/": {
        "pgqueue_job",
        "pgqueue_queue",
        "pgqueue_queue_key_rate",
        "pgqueue_workflow_edge",
        "pgqueue_rollup",
    },
    "workflows/": {"pgqueue_workflow", "pgqueue_workflow_edge"},
    "queues.py": {"pgqueue_queue", "pgqueue_queue_key_rate"},
    "webhooks/store.py": {
        "pgqueue_application",
        "pgqueue_delivery",
        "pgqueue_delivery_attempt",
        "pgqueue_endpoint",
        "pgqueue_event",
        "pgqueue_rollup",
    },
    "history.py": {"pgqueue_job", "pgqueue_job_history"},
    "operations.py": {
        "pgqueue_job",
        "pgqueue_job_history",
        "pgqueue_delivery",
        "pgqueue_endpoint",
        "pgqueue_workflow_edge",
    },
    "mq/": {"pgqueue_mq_queue", "pgqueue_mq_topic_binding"},
    "periodic/": {"pgqueue_schedule", "pgqueue_schedule_tick"},
    "rollup/": {"pgqueue_rollup"},
    "maintenance.py": {
        "pgqueue_job",
        "pgqueue_delivery",
        "pgqueue_delivery_attempt",
        "pgqueue_event",
        "pgqueue_queue_key_rate",
    },
}

#: Modules that write queue tables by design without being a store, with why.
NOT_STORES = {
    # The benchmark writes its raw-SQL references into a scratch database it
    # creates and drops (bench/guard.py refuses any other).
    "bench/",
    # The migrations are the only DDL, and their data steps run once.
    "migrations/",
    # The statements' text: executing one is the write, and that is checked.
    "sql/",
    # Database objects (the trigger that parks a disabled endpoint's deliveries):
    # their UPDATE runs inside PostgreSQL, declared once for the migrations.
    "models/database_objects.py",
}

#: Writes outside the stores still being moved into one, each as
#: ``module::function .call`` (``table``). Empty: every write of a queue table is a
#: store's; keep it so.
KNOWN_OUTSIDE_STORES: set[str] = set()

ORM_WRITES = {
    "save",
    "create",
    "update",
    "delete",
    "bulk_create",
    "bulk_update",
    "get_or_create",
    "update_or_create",
}
SQL_WRITE = re.compile(r"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM|COPY)\s+(\{([\w.]+)\}|\w+)", re.I)


def _tables_written(text: str) -> set[str]:
    """The queue tables a statement's text inserts into, updates, deletes from or
    copies into (``{JOB_TABLE}``-style placeholders resolved through ``sql``)."""
    text = re.sub(r"/\*.*?\*/|--[^\n]*", "", text, flags=re.S)
    found = set()
    for match in SQL_WRITE.finditer(text):
        name = match.group(3) or match.group(2)
        table = getattr(sql, name.rpartition(".")[2], name)
        if isinstance(table, str) and table in QUEUE_TABLES:
            found.add(table)
    return found


#: ``sql.NAME`` -> the queue tables that statement writes.
NAMED_WRITES = {
    name: tables
    for name in sql.__all__
    if isinstance(getattr(sql, name), str) and (tables := _tables_written(getattr(sql, name)))
}
#: Builders of UPDATE statements (``sql.endpoint_update(...)``, ``sql.operator_update``).
NAMED_WRITES |= {
    "endpoint_update": {"pgqueue_endpoint"},
    "operator_update": {
        "pgqueue_job",
        "pgqueue_delivery",
        "pgqueue_endpoint",
        "pgqueue_workflow_edge",
    },
}


#: Variables an instance save or delete is called on, by the table their row is in:
#: ``endpoint.save()``; ``form.save()`` and ``obj.delete()`` are Django's idioms
#: for a model row whose class the code does not name (an Endpoint form).
INSTANCE_NAMES = {
    "job": "pgqueue_job",
    "endpoint": "pgqueue_endpoint",
    "application": "pgqueue_application",
    "event": "pgqueue_event",
    "delivery": "pgqueue_delivery",
    "schedule": "pgqueue_schedule",
    "obj": "a model row",
    "row": "a model row",
    "form": "a model row",
    "instance": "a model row",
}
ANY_ROW = "a model row"
#: Variables that hold a QuerySet by Django's convention (an admin action's
#: ``queryset``): any ORM write on them counts.
QUERYSET_NAMES = {"queryset", "qs"}


def _chain_names(node: ast.AST) -> set[str]:
    """The names a call's receiver is built from (``Job.objects.filter(...)``)."""
    names = set()
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Attribute | ast.Subscript):
            node = node.value
        else:
            break
    if isinstance(node, ast.Name):
        names.add(node.id)
    return names


class _Writes(ast.NodeVisitor):
    def __init__(self, module: str) -> None:
        self.module = module
        self.scope: list[str] = []
        self.sql_names: set[str] = set()  # names imported from sql/
        self.found: list[tuple[str, str]] = []  # (where, table or model)

    def _where(self, what: str) -> str:
        return f"{self.module}::{'.'.join(self.scope) or '<module>'} {what}"

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]
    visit_ClassDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and (node.module == "sql" or node.module.endswith(".sql")):
            self.sql_names |= {alias.asname or alias.name for alias in node.names}
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name) and node.value.id == "sql":
            for table in sorted(NAMED_WRITES.get(node.attr, ())):
                self.found.append((self._where(f"sql.{node.attr}"), table))
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.sql_names:
            for table in sorted(NAMED_WRITES.get(node.id, ())):
                self.found.append((self._where(node.id), table))

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            for table in sorted(_tables_written(node.value)):
                self.found.append((self._where("inline SQL"), table))

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        text = "".join(
            part.value if isinstance(part, ast.Constant) else "{" + ast.unparse(part.value) + "}"  # type: ignore[attr-defined]
            for part in node.values
        )
        for table in sorted(_tables_written(text)):
            self.found.append((self._where("inline SQL"), table))

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ORM_WRITES:
            for model in sorted(_chain_names(func.value) & set(QUEUE_MODELS)):
                self.found.append((self._where(f".{func.attr}()"), QUEUE_MODELS[model]))
            receiver = func.value
            if (
                func.attr in ("save", "delete")
                and isinstance(receiver, ast.Name)
                and receiver.id in INSTANCE_NAMES
            ):
                self.found.append((self._where(f".{func.attr}()"), INSTANCE_NAMES[receiver.id]))
            elif isinstance(receiver, ast.Name) and receiver.id in QUERYSET_NAMES:
                self.found.append((self._where(f".{func.attr}()"), ANY_ROW))
        self.generic_visit(node)


def _modules() -> list[str]:
    return sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py"))


def _home(module: str, homes: dict[str, set[str]] | set[str]) -> str | None:
    return next((home for home in homes if module == home or module.startswith(home)), None)


def _writes() -> list[tuple[str, str, str]]:
    """(module, where, table) of every write of a queue table in the package."""
    out = []
    for module in _modules():
        visitor = _Writes(module)
        visitor.visit(ast.parse((PACKAGE / module).read_text(), module))
        out += [(module, where, table) for where, table in visitor.found]
    return out


def test_the_finder_sees_every_kind_of_write():
    source = """
from ..sql import CLAIM_JOBS
def f(cursor, endpoint):
    Job.objects.filter(pk=1).update(status="dead")
    Endpoint(url="x").save()
    Delivery.objects.bulk_create([])
    Event.objects.get_or_create(pk=1)
    endpoint.save()
    form.save()
    queryset.update(status="cancelled")
    cursor.execute(sql.COMPLETE_JOBS, {})
    cursor.execute(CLAIM_JOBS, {})
    cursor.execute(f"DELETE FROM {sql.EVENT_TABLE} WHERE id = %s", [1])
    cursor.execute("COPY pgqueue_delivery (id) FROM STDIN")
    cursor.execute("SELECT 1 FROM pgqueue_job")
    {}.update(a=1)
"""
    visitor = _Writes("example.py")
    visitor.visit(ast.parse(source))
    assert sorted(table for _, table in visitor.found) == [
        "a model row",
        "a model row",
        "pgqueue_delivery",
        "pgqueue_delivery",
        "pgqueue_endpoint",
        "pgqueue_endpoint",
        "pgqueue_event",
        "pgqueue_event",
        "pgqueue_job",
        "pgqueue_job",
        "pgqueue_job",
        # COMPLETE_JOBS releases workflow steps: it marks their edges counted.
        "pgqueue_workflow_edge",
    ]


def test_the_finder_reads_every_module():
    modules = _modules()
    for module in ("backend.py", "webhooks/fanout.py", "api/views.py", "admin/jobs.py"):
        if (PACKAGE / module).exists():
            assert module in modules
    writes = _writes()
    assert any(m.startswith("jobs/") for m, _, _ in writes)
    assert any(m == "operations.py" for m, _, _ in writes)


def test_queue_rows_are_written_only_by_their_stores():
    outside = []
    for module, where, table in _writes():
        if _home(module, NOT_STORES):
            continue
        home = _home(module, STORES)
        if home is not None and (table in STORES[home] or table == ANY_ROW):
            continue
        entry = f"{where} ({table})"
        if entry not in KNOWN_OUTSIDE_STORES:
            outside.append(entry)
    assert not outside, "writes outside the stores:\n" + "\n".join(outside)


def test_the_known_offenders_are_still_offending():
    """An entry that no longer matches a write is deleted from KNOWN_OUTSIDE_STORES."""
    found = {f"{where} ({table})" for _, where, table in _writes()}
    assert not KNOWN_OUTSIDE_STORES - found, sorted(KNOWN_OUTSIDE_STORES - found)


#: Modules that call a store and must not run statements themselves.
NO_SQL = [
    "worker/sources.py",
    "webhooks/delivery_source.py",
    "mq/source.py",
    "tracing.py",
    "backend.py",
]
SQL_CALLS = {"execute", "executemany", "copy"}


@pytest.mark.parametrize("module", NO_SQL)
def test_sources_tracing_and_the_backend_run_no_sql_of_their_own(module):
    tree = ast.parse((PACKAGE / module).read_text(), module)
    found = [
        f"{module}:{node.lineno} .{node.func.attr}()"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in SQL_CALLS
    ]
    assert not found, "\n".join(found)


def _documented_stores() -> dict[str, set[str]]:
    """The "State changes: the stores" table of docs/architecture.md: module -> tables."""
    text = DOC.read_text()
    section = text.split("### State changes: the stores", 1)[1].split("\n#", 1)[0]
    stores = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        module = cells[0].strip("`")
        stores[module] = set(re.findall(r"`(pgqueue_\w+)`", cells[1]))
    return stores


def test_the_page_lists_the_stores_and_their_tables():
    assert _documented_stores() == STORES
