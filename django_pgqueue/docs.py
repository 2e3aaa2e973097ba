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


#: Where the fix of each system check is documented: (page, anchor), the anchor being
#: the id MkDocs gives the heading. Every hint ends with this link (:func:`check_hint`);
#: tests/test_check_links.py proves each page and anchor exist in the docs.
CHECK_DOCS: dict[str, tuple[str, str]] = {
    "django_pgqueue.E001": ("settings", "pgqueue-keys"),
    "django_pgqueue.E002": ("settings", "pgqueue-keys"),
    "django_pgqueue.E003": ("quickstart", "1-install"),
    "django_pgqueue.E004": ("operations", "moving-the-queue-to-its-own-database"),
    "django_pgqueue.E010": ("tasks", "retry-options"),
    "django_pgqueue.E011": ("quickstart", "2-configure"),
    "django_pgqueue.E020": ("periodic", "validation-and-isolation"),
    "django_pgqueue.E021": ("periodic", "validation-and-isolation"),
    "django_pgqueue.E030": ("multi-tenant", "the-customer-portal"),
    "django_pgqueue.W001": ("quickstart", "2-configure"),
    "django_pgqueue.W002": ("operations", "migrate"),
    "django_pgqueue.W040": ("http-api", "limits"),
}


def check_hint(check_id: str, text: str = "") -> str:
    """A check's hint: ``text`` (what to do), then the link to where it is explained."""
    link = docs_url(*CHECK_DOCS[check_id])
    return f"{text} See {link}" if text else f"See {link}"
