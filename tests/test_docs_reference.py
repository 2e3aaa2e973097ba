"""The settings and commands reference is complete: every option of every command and
every PGQUEUE key appears in the documentation."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

from django_pgqueue.conf import DEFAULTS, RETENTION_DEFAULTS, WEBHOOK_DEFAULTS

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
    options = {
        option
        for action in parser._actions
        if action.help != "==SUPPRESS=="
        for option in action.option_strings
        if option.startswith("--")
    } - DJANGO_OPTIONS
    text = all_docs()
    assert f"`{name}`" in (DOCS / "commands.md").read_text()
    missing = sorted(option for option in options if f"`{option}" not in text)
    assert not missing, f"{name}: undocumented options {missing}"


def test_every_setting_is_documented():
    text = (DOCS / "settings.md").read_text()
    keys = [*DEFAULTS, *WEBHOOK_DEFAULTS, *RETENTION_DEFAULTS]
    missing = [key for key in keys if f"`{key}`" not in text]
    assert not missing, f"settings.md does not document {missing}"
