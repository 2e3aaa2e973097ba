"""The WSGI application of the benchmark's server (``pgqueue_bench --only ingest``).

The project's own settings (``DJANGO_SETTINGS_MODULE``), with three changes made
before the first request: the queue's alias points at the scratch database
(``PGQUEUE_BENCH_ALIAS``, ``PGQUEUE_BENCH_DATABASE``), its connections persist
between requests as a production deployment keeps them, and the URLconf is the
benchmark's own (``bench/urls.py``: the HTTP API and the ceiling view side by side).
A server whose connections reach any other database refuses to start (``guard.py``).
"""

from __future__ import annotations

import os

import django
from django.conf import settings

django.setup(set_prefix=False)

_alias = os.environ["PGQUEUE_BENCH_ALIAS"]
# Before any connection is opened: Django's connection handler reads these dicts.
from django.db import connections  # noqa: E402

for _conf in (settings.DATABASES[_alias], connections.settings[_alias]):
    _conf["NAME"] = os.environ["PGQUEUE_BENCH_DATABASE"]
    _conf["CONN_MAX_AGE"] = 600
settings.ROOT_URLCONF = "django_pgqueue.bench.urls"

# Like every other process of a run: refuse unless the connections reach the scratch
# database (a project naming its database in OPTIONS would otherwise take the events).
from .guard import check_scratch_database  # noqa: E402

check_scratch_database(os.environ["PGQUEUE_BENCH_DATABASE"], _alias)

from django.core.handlers.wsgi import WSGIHandler  # noqa: E402

application = WSGIHandler()
