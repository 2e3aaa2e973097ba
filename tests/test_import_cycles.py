"""The package has no import circles (docs/architecture.md, "No import circles").

A circle means a definition sits in the wrong module: the two ends cannot be read,
tested or changed apart, and which one imports first decides whether the other
sees a half-built module. The graph is read from the source with ``ast`` and
counts every import, at module level or inside a function (a lazy import is still
a dependency; it only hides the circle until run time), except those under
``if TYPE_CHECKING:``, which never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import django_pgqueue

PACKAGE = Path(django_pgqueue.__file__).parent
NAME = "django_pgqueue"

#: Circles known and being removed (none: keep it so).
KNOWN_CYCLES: set[frozenset[str]] = set()


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        if "migrations" in relative.parts:
            continue  # generated; they import the models, never the other way
        parts = list(relative.parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree`` outside ``if TYPE_CHECKING:`` blocks."""
    out: list[ast.Import | ast.ImportFrom] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def _graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports.

    ``from package import name`` depends on ``package.name`` when that is a module
    and on the package's ``__init__`` otherwise. The package's own ``__init__``
    imports its public names lazily, so an edge to it carries no circle and is
    left out, as are edges from a module to itself.
    """
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join([*parts, base] if base else parts)
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    targets.append(submodule if submodule in modules else base)
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target not in (module, NAME):
                    graph[module].add(target)
    return graph


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative; components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_the_graph_is_read():
    graph = _graph(_modules())
    assert "django_pgqueue.jobs.store" in graph["django_pgqueue.backend"]
    assert "django_pgqueue.sql" in graph["django_pgqueue.jobs.store"]


def test_lazy_imports_count_and_type_checking_imports_do_not():
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from .hints import Only\n"
        "def f():\n"
        "    from .lazy import thing\n"
    )
    modules = [node.module for node in _imports(tree)]
    assert "lazy" in modules and "hints" not in modules


def test_the_finder_sees_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _strongly_connected(graph) == [{"a", "b", "c"}]


def test_the_package_has_no_import_circles():
    circles = [c for c in _strongly_connected(_graph(_modules())) if c not in KNOWN_CYCLES]
    assert not circles, "\n".join(" <-> ".join(sorted(c)) for c in circles)
