"""Every ``pip install`` line a reader may copy installs this project or a package we name.

A line that names a look-alike distribution (``django-pgqueue`` is another project) or
an extra we do not define installs the wrong thing without an error, so each line in
the README and ``docs/`` is read and checked here.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DISTRIBUTION = canonicalize_name(PYPROJECT["project"]["name"])
EXTRAS = set(PYPROJECT["project"]["optional-dependencies"])
#: Where the docs have the reader's clone of the repository (before the first release
#: the project installs from a checkout), and "." in the contributor's own clone.
CHECKOUT_PATHS = {"/path/to/django_pgqueue", "."}
#: Packages the docs tell readers to install beside the project.
THIRD_PARTY = {"psycopg"}
#: No release on PyPI yet: a PyPI install of the project would find nothing.
RELEASED = False
PIP_INSTALL = re.compile(r"pip install ([^`\n]+)")


def install_lines() -> list[tuple[str, str]]:
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in PIP_INSTALL.finditer(line):
                found.append((f"{path.relative_to(ROOT)}:{number}", match.group(1)))
    return found


def problems_of(spec: str) -> list[str]:
    """What is wrong with one requirement of a pip install line ([] when nothing)."""
    path, bracket, extras = spec.partition("[")
    if path.startswith((".", "/", "~")):
        if path not in CHECKOUT_PATHS:
            return [f"{spec!r}: a path other than the documented checkout"]
        named = set(extras.rstrip("]").split(",")) if bracket else set()
        return [f"{spec!r}: no such extra {extra!r}" for extra in sorted(named - EXTRAS)]
    try:
        requirement = Requirement(spec)
    except InvalidRequirement:
        return [f"{spec!r}: not a requirement pip understands"]
    name = canonicalize_name(requirement.name)
    if name == DISTRIBUTION:
        unknown = sorted(requirement.extras - EXTRAS)
        if unknown:
            return [f"{spec!r}: no such extra {', '.join(unknown)}"]
        if not RELEASED and not requirement.url:
            return [f"{spec!r}: not on PyPI yet; install from a checkout"]
        return []
    if name not in THIRD_PARTY:
        return [f"{spec!r}: {name} is neither this project ({DISTRIBUTION}) nor a known package"]
    return []


def test_the_docs_have_install_lines():
    assert len(install_lines()) >= 8


def test_every_install_line_names_this_project_or_a_known_package():
    problems = []
    for where, command in install_lines():
        specs = [arg for arg in shlex.split(command, comments=True) if not arg.startswith("-")]
        assert specs, f"{where}: `pip install {command}` installs nothing"
        problems.extend(f"{where}: {problem}" for spec in specs for problem in problems_of(spec))
    assert problems == []


def test_the_checks_catch_a_look_alike_and_a_missing_extra():
    assert problems_of("django-pgqueue[schema]")
    assert problems_of("/path/to/django_pgqueue[nope]")
    assert problems_of("django-pgqueue-engine[binary]")  # before the first release
    assert problems_of("/path/to/django_pgqueue[binary,django52]") == []
