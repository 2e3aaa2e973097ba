"""Links from error messages and hints to the documentation.

A hint must name a page the reader can open. Run from a source checkout (the way
the project is installed until its first release: ``pip install -e <checkout>``),
the ``docs/`` folder sits next to the package, and hints name its files
(``file:///…/docs/settings.md#anchor``), which exist whether or not the site is
published. Installed from a wheel there is no such folder, and hints name the
documentation site: the ``Documentation`` entry of ``[project.urls]`` in
pyproject.toml, read from the installed distribution's metadata, so that the
package and its messages cannot disagree (a build for another host sets it there);
the constant below is used when the metadata is missing.

Identifiers sent to other programs (the HTTP API's problem ``type``) always use the
site URL (:func:`docs_site_url`): they must be the same on every server and must not
show a server's file paths to its clients.

``tests/test_docs_links.py`` checks that every page and anchor the code names exists
in ``docs/``.
"""

from __future__ import annotations

from functools import cache
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "django-pgqueue-engine"
#: Keep equal to ``Documentation`` in pyproject.toml's ``[project.urls]``.
FALLBACK_BASE = "https://django-pgqueue-engine.readthedocs.io/en/latest/"
#: Where the pages are in a source checkout (the package's parent folder).
CHECKOUT_DOCS = Path(__file__).resolve().parent.parent / "docs"


@cache
def docs_base() -> str:
    """The documentation site's base URL, ending with ``/``."""
    try:
        urls = metadata.metadata(DISTRIBUTION).get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        urls = []
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "documentation" and url.strip():
            return url.strip().rstrip("/") + "/"
    return FALLBACK_BASE


def docs_site_url(page: str, anchor: str = "") -> str:
    """The site URL of a docs page, by its file name in ``docs/`` without ``.md``.

    The site is built by MkDocs with directory URLs: ``docs/settings.md`` is served
    at ``<base>settings/``.
    """
    url = f"{docs_base()}{page}/"
    return f"{url}#{anchor}" if anchor else url


def docs_url(page: str, anchor: str = "") -> str:
    """Where a person reads a docs page: the checkout's file if there is one, else the site."""
    source = CHECKOUT_DOCS / f"{page}.md"
    if source.is_file():
        uri = source.as_uri()
        return f"{uri}#{anchor}" if anchor else uri
    return docs_site_url(page, anchor)


#: Where the fix of each system check is documented: (page, anchor), the anchor being
#: the id MkDocs gives the heading. Every hint ends with this link (:func:`check_hint`);
#: tests/test_check_links.py proves each page and anchor exist in the docs.
CHECK_DOCS: dict[str, tuple[str, str]] = {
    "django_pgqueue.E001": ("settings", "pgqueue-keys"),
    "django_pgqueue.E002": ("settings", "pgqueue-keys"),
    "django_pgqueue.E003": ("quickstart", "1-install"),
    "django_pgqueue.E004": ("operations", "moving-the-queue-to-its-own-database"),
    "django_pgqueue.E005": ("operations", "upgrading-and-rolling-back"),
    "django_pgqueue.E010": ("tasks", "retry-options"),
    "django_pgqueue.E011": ("quickstart", "2-configure"),
    "django_pgqueue.E020": ("periodic", "validation-and-isolation"),
    "django_pgqueue.E021": ("periodic", "validation-and-isolation"),
    "django_pgqueue.E030": ("multi-tenant", "the-customer-portal"),
    "django_pgqueue.W031": ("multi-tenant", "destinations-in-the-portal"),
    "django_pgqueue.W001": ("quickstart", "2-configure"),
    "django_pgqueue.W002": ("operations", "migrate"),
    "django_pgqueue.W040": ("http-api", "limits"),
    "django_pgqueue.W050": ("operations", "history-and-retention"),
}


def check_hint(check_id: str, text: str = "") -> str:
    """A check's hint: ``text`` (what to do), then the link to where it is explained."""
    link = docs_url(*CHECK_DOCS[check_id])
    return f"{text} See {link}" if text else f"See {link}"
