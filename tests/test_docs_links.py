"""Every link the code gives a reader leads to a page, and an anchor, that exists.

Hints and errors name pages with ``docs_url(page, anchor)`` (django_pgqueue/docs.py);
the HTTP API names its problem types with ``docs_site_url``. Both are found here by
reading the source, so a renamed heading or page fails this test, not a user.
Anchors are computed the way MkDocs computes them (Python-Markdown's ``toc`` and
``attr_list`` extensions, plus raw ``<a id>``), from the same ``docs/`` files.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import markdown
import pytest

from django_pgqueue import docs
from django_pgqueue.api.http import PROBLEMS

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "django_pgqueue"
DOCS = ROOT / "docs"
LINKERS = {"docs_url", "docs_site_url"}


@cache
def anchors(page: str) -> frozenset[str]:
    """The ids of one page as the built site has them."""
    html = markdown.markdown(
        (DOCS / f"{page}.md").read_text(),
        extensions=["toc", "attr_list", "tables", "fenced_code"],
    )
    return frozenset(re.findall(r'\bid="([^"]+)"', html))


def _calls() -> list[tuple[str, int, ast.Call]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name in LINKERS and path.name != "docs.py":
                found.append((str(path.relative_to(ROOT)), node.lineno, node))
    return found


def emitted_links() -> list[tuple[str, str, str]]:
    """(where, page, anchor) for every link the code can emit."""
    links = []
    for where, line, call in _calls():
        args = call.args
        page = args[0]
        assert isinstance(page, ast.Constant), f"{where}:{line}: the page must be a literal"
        if len(args) < 2:
            links.append((f"{where}:{line}", page.value, ""))
        elif isinstance(args[1], ast.Constant):
            links.append((f"{where}:{line}", page.value, args[1].value))
        elif where.endswith("api/http.py"):
            # problem(): one anchor per error code, "problem-" + the code with hyphens.
            links.extend(
                (f"{where}:{line} ({code})", page.value, f"problem-{code.replace('_', '-')}")
                for code in PROBLEMS
            )
        else:
            pytest.fail(f"{where}:{line}: a computed anchor this test does not know how to expand")
    # The system checks' hints link through one table (docs.check_hint).
    links.extend(
        (f"docs.CHECK_DOCS[{check_id!r}]", page, anchor)
        for check_id, (page, anchor) in docs.CHECK_DOCS.items()
    )
    return links


def test_the_code_emits_links():
    # The scan itself works: the checks, the worker and the API all link to the docs.
    pages = {page for _, page, _ in emitted_links()}
    assert {"settings", "worker", "http-api"} <= pages


@pytest.mark.parametrize(("where", "page", "anchor"), emitted_links())
def test_every_emitted_link_resolves(where, page, anchor):
    assert (DOCS / f"{page}.md").is_file(), f"{where} links to docs/{page}.md, which is missing"
    if anchor:
        assert anchor in anchors(page), f"{where} links to docs/{page}.md#{anchor}: no such anchor"


def test_every_docs_file_named_in_the_code_exists():
    # Messages and docstrings also name pages by path ("see docs/operations.md").
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in re.findall(r"\bdocs/([A-Za-z0-9_-]+)\.md", path.read_text()):
            if not (DOCS / f"{name}.md").is_file():
                missing.append(f"{path.relative_to(ROOT)}: docs/{name}.md")
    assert missing == []


def test_in_a_checkout_a_hint_names_a_file_that_exists():
    # The site is not published before the first release; a checkout has the pages.
    url = docs.docs_url("settings", "webhooks")
    assert url.startswith("file://") and url.endswith("/docs/settings.md#webhooks")
    assert Path(url.removeprefix("file://").partition("#")[0]).is_file()


def test_without_a_checkout_a_hint_names_the_site(monkeypatch, tmp_path):
    monkeypatch.setattr(docs, "CHECKOUT_DOCS", tmp_path)
    assert docs.docs_url("settings", "webhooks") == docs.docs_site_url("settings", "webhooks")
    assert docs.docs_site_url("settings").startswith("https://")


def test_a_problem_type_is_the_site_url_not_a_server_path():
    from django_pgqueue.api.http import ApiError, problem

    response = problem(ApiError("not_found", "no such event"))
    assert b'"type": "https://' in response.content
    assert str(ROOT).encode() not in response.content
