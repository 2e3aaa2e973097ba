"""Every system check's hint ends with a link to a docs page and anchor that exist.

The pages are rendered with Python-Markdown's ``toc`` extension, as MkDocs renders them,
so an anchor is the id the built site gives the heading (not a guess at its slug).
"""

from __future__ import annotations

import re
from pathlib import Path

import markdown
import pytest
from django.test import override_settings

from django_pgqueue.checks import check_settings
from django_pgqueue.docs import CHECK_DOCS, docs_url

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
CHECK_ID = re.compile(r"django_pgqueue\.[EW]\d{3}")


def _anchors(page: str) -> set[str]:
    md = markdown.Markdown(extensions=["toc", "attr_list", "fenced_code", "tables"])
    md.convert((DOCS / f"{page}.md").read_text())

    def walk(tokens: list[dict]) -> set[str]:
        found: set[str] = set()
        for token in tokens:
            found.add(token["id"])
            found |= walk(token["children"])
        return found

    return walk(md.toc_tokens)  # type: ignore[attr-defined]


def _ids_in_code() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "django_pgqueue").rglob("*.py"):
        if path.name != "docs.py":
            found |= set(CHECK_ID.findall(path.read_text()))
    return found


def test_every_check_in_the_code_has_a_documented_link():
    used = _ids_in_code()
    assert used, "no check ids found: the scan is broken"
    assert sorted(used - set(CHECK_DOCS)) == []
    assert sorted(set(CHECK_DOCS) - used) == []


@pytest.mark.parametrize("check_id", sorted(CHECK_DOCS))
def test_each_link_names_a_page_and_anchor_of_the_built_docs(check_id):
    page, anchor = CHECK_DOCS[check_id]
    assert (DOCS / f"{page}.md").is_file(), f"{check_id}: docs/{page}.md does not exist"
    assert f"{page}.md" in (ROOT / "mkdocs.yml").read_text(), f"{page}.md is not in the nav"
    if anchor:
        assert anchor in _anchors(page), f"{check_id}: no heading #{anchor} in docs/{page}.md"
    # Every check is also in the checks page's table.
    assert f"`{check_id}`" in (DOCS / "checks.md").read_text()


def test_e002_hints_carry_their_link():
    with override_settings(PGQUEUE={"DATABASE": "nowhere"}):
        [message] = check_settings()
    assert message.id == "django_pgqueue.E002"
    assert message.hint.endswith(docs_url(*CHECK_DOCS["django_pgqueue.E002"]))


def test_e010_hints_carry_their_link():
    from django_pgqueue.backend import PgQueueBackend

    messages = PgQueueBackend("x", {"OPTIONS": {"MAX_ATTEMPTS": 0}}).check()
    assert [m.id for m in messages] == ["django_pgqueue.E010"]
    assert messages[0].hint.endswith(docs_url(*CHECK_DOCS["django_pgqueue.E010"]))
