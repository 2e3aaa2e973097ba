"""Links from error messages and hints to the published documentation.

A pip user has no ``docs/`` folder, so hints name a URL. The base URL is the
``Documentation`` entry of ``[project.urls]`` in pyproject.toml, read from the installed
distribution's metadata, so that the package and its messages cannot disagree; the
constant below is used when the metadata is missing (a source checkout run in place).
"""

from __future__ import annotations

from functools import cache
from importlib import metadata

DISTRIBUTION = "django-pgqueue-engine"
#: Keep equal to ``Documentation`` in pyproject.toml's ``[project.urls]``.
FALLBACK_BASE = "https://django-pgqueue-engine.readthedocs.io/en/latest/"


@cache
def docs_base() -> str:
    """The documentation's base URL, ending with ``/``."""
    try:
        urls = metadata.metadata(DISTRIBUTION).get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        urls = []
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "documentation" and url.strip():
            return url.strip().rstrip("/") + "/"
    return FALLBACK_BASE


def docs_url(page: str, anchor: str = "") -> str:
    """The URL of a docs page, by its file name in ``docs/`` without ``.md``.

    The site is built by MkDocs with directory URLs: ``docs/settings.md`` is served
    at ``<base>settings/``.
    """
    url = f"{docs_base()}{page}/"
    return f"{url}#{anchor}" if anchor else url
