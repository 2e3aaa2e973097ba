"""Run a management command with one database alias pointed at another database.

    python -m django_pgqueue.bench <alias> <database name> <command> [options...]

``pgqueue_bench`` starts its ``migrate`` and ``runworkers`` children this way, so
they use its scratch database whichever alias holds the queue. Before the command
runs, the child checks that its connections really reach that database
(``guard.py``) and exits with status 1 and the reason otherwise. The project comes
from ``DJANGO_SETTINGS_MODULE``, as for ``django-admin``.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    if len(argv) < 3:
        sys.exit(__doc__)
    alias, name, *command = argv
    import django
    from django.conf import settings

    django.setup()
    if alias not in settings.DATABASES:
        sys.exit(f"No database alias {alias!r} in DATABASES ({', '.join(settings.DATABASES)}).")
    # Before any connection is opened: Django's connection handler reads these dicts.
    from django.db import connections

    settings.DATABASES[alias]["NAME"] = name
    connections.settings[alias]["NAME"] = name

    from .guard import WrongDatabase, check_scratch_database

    try:
        check_scratch_database(name, alias)
    except WrongDatabase as exc:
        sys.exit(f"pgqueue_bench child ({' '.join(command[:1])}): {exc}")

    from django.core.management import execute_from_command_line

    execute_from_command_line([sys.argv[0], *command])


if __name__ == "__main__":
    main(sys.argv[1:])
