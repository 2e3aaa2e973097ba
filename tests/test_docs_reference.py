"""The settings and commands reference is complete: every option of every command and
every PGQUEUE key appears in the documentation."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

from django_pgqueue.conf import API_DEFAULTS, DEFAULTS, RETENTION_DEFAULTS, WEBHOOK_DEFAULTS

DOCS = Path(__file__).resolve().parent.parent / "docs"
OURS = [name for name, app in get_commands().items() if app == "django_pgqueue"]
#: Options every Django command has (documented by Django).
DJANGO_OPTIONS = {
    "--version",
    "--verbosity",
    "--settings",
    "--pythonpath",
    "--traceback",
    "--no-color",
    "--force-color",
    "--skip-checks",
    "--help",
}


def all_docs() -> str:
    return "\n".join(page.read_text() for page in DOCS.glob("*.md"))


@pytest.mark.parametrize("name", sorted(OURS))
def test_every_command_option_is_documented(name):
    parser = load_command_class("django_pgqueue", name).create_parser("manage.py", name)
    text = all_docs()
    assert f"`{name}`" in (DOCS / "commands.md").read_text()
    # A subcommand's options are documented as `subcommand --option ...`.
    missing = sorted(
        f"{prefix}{option}"
        for prefix, option in _options(parser)
        if option not in DJANGO_OPTIONS and f"`{prefix}{option}" not in text
    )
    assert not missing, f"{name}: undocumented options {missing}"


def _options(parser, prefix=""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, subparser in action.choices.items():
                yield from _options(subparser, f"{prefix}{sub} ")
        elif action.help != "==SUPPRESS==":
            for option in action.option_strings:
                if option.startswith("--") and option != "--help":
                    yield prefix, option


def test_every_setting_is_documented():
    text = (DOCS / "settings.md").read_text()
    keys = [*DEFAULTS, *WEBHOOK_DEFAULTS, *RETENTION_DEFAULTS, *API_DEFAULTS]
    missing = [key for key in keys if f"`{key}`" not in text]
    assert not missing, f"settings.md does not document {missing}"


def test_the_architecture_page_names_only_modules_that_exist():
    """docs/architecture.md is a map: every module it names (``jobs/store.py``, or a bare
    ``fragments.py`` in the ``sql/`` row) is a file of the package or the repository."""
    import re

    repo = DOCS.parent
    package = repo / "django_pgqueue"
    files = [p.relative_to(repo).as_posix() for p in repo.rglob("*.py") if ".venv" not in str(p)]
    named = set(re.findall(r"`([\w/.]+\.py)`", (DOCS / "architecture.md").read_text()))
    assert len(named) > 30
    missing = sorted(
        name
        for name in named
        if not (package / name).exists()
        and not (repo / name).exists()
        and not any(f.endswith("/" + name) for f in files)
    )
    assert not missing, missing
