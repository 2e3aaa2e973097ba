"""django_pgqueue in the peer benchmark harness (``bench-peers/peers/harness.py``).

Copy this file to ``peers/bench_django_pgqueue.py`` and add
``peers/requirements-django-pgqueue.txt``::

    Django==6.1.3
    psycopg[binary]==3.3.9
    -e /path/to/django_pgqueue

then run it next to the others, in one run::

    PEERS="raw-psycopg pgqueuer django-pgqueue" bash peers/run_peers.sh

Copied also as ``peers/bench_django_pgqueue_chains.py`` (with a
``requirements-django-pgqueue-chains.txt`` like the one above), the same file is
the workflows peer: the no-op task as chains of 10 steps, steps per second and
CPU per step beside plain jobs (``PEERS="raw-psycopg django-pgqueue
django-pgqueue-chains"``).

It is self-contained: on first use it writes a tiny Django project (``djpgq/``:
settings and the two benchmark tasks) next to itself. Settings: Django 6's
built-in Tasks framework with our backend, ``DEBUG = False``,
``CONN_MAX_AGE = 0`` (Django's default; the worker's queue bookkeeping runs on
its own persistent psycopg connections whatever this says), every ``PGQUEUE``
knob at its default.

Configs, matching the peers: ``c1`` (1 process x 1 thread), ``c10`` (1 x 10),
``p2`` (2 processes x 1 thread); latency with LISTEN/NOTIFY (``notify``) and
polling only at a 0.1 s poll (``poll0.1``).
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djpgq.settings")

import harness  # noqa: E402

DB = "bench_django_pgqueue"
TABLE = "pgqueue_job"

SETTINGS = f'''\
"""Settings of the django_pgqueue peer (written by bench_django_pgqueue.py)."""
import os

SECRET_KEY = "bench-not-secret"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["django_pgqueue"]
DATABASES = {{
    "default": {{
        "ENGINE": "django.db.backends.postgresql",
        "HOST": os.environ.get("BENCH_PGHOST", "127.0.0.1"),
        "PORT": os.environ.get("BENCH_PGPORT", "5432"),
        "USER": os.environ.get("BENCH_PGUSER", "postgres"),
        "NAME": os.environ.get("BENCH_DB", "{DB}"),
        "CONN_MAX_AGE": 0,
    }}
}}
TASKS = {{"default": {{"BACKEND": "django_pgqueue.backend.PgQueueBackend", "QUEUES": []}}}}
PGQUEUE = {{"POLL_INTERVAL": float(os.environ.get("BENCH_POLL_INTERVAL", "1.0"))}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGGING = {{
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {{"console": {{"class": "logging.StreamHandler"}}}},
    "loggers": {{"django_pgqueue": {{"handlers": ["console"], "level": "WARNING"}}}},
}}
'''

TASKS = '''\
"""The two benchmark tasks (written by bench_django_pgqueue.py)."""
import os
import sys

from django.tasks import task

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402


@task()
def noop():
    return None


@task()
def lat(seq, t):
    harness.record_latency(seq, t)
'''


def write_project() -> None:
    """Write ``djpgq/`` next to this file (idempotent)."""
    pkg = os.path.join(HERE, "djpgq")
    os.makedirs(pkg, exist_ok=True)
    for name, text in (("__init__.py", ""), ("settings.py", SETTINGS), ("tasks.py", TASKS)):
        path = os.path.join(pkg, name)
        current = None
        if os.path.exists(path):
            with open(path) as fh:
                current = fh.read()
        if current != text:
            with open(path, "w") as fh:
                fh.write(text)


class DjangoPgQueue(harness.Adapter):
    peer = "django-pgqueue"
    db = DB
    remaining_sql = f"SELECT count(*) FROM {TABLE} WHERE status IN ('pending', 'in_progress')"
    has_batch = True
    drain_configs = [
        {"workers": 1, "concurrency": 1, "label": "c1"},
        {"workers": 1, "concurrency": 10, "label": "c10"},
        {"workers": 2, "concurrency": 1, "label": "p2"},
    ]
    latency_configs = [
        {"workers": 1, "concurrency": 1, "notify": True, "poll": 1.0, "label": "notify"},
        {"workers": 1, "concurrency": 1, "notify": False, "poll": 0.1, "label": "poll0.1"},
    ]

    def setup(self) -> None:
        write_project()
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        from djpgq import tasks

        self.tasks = tasks

    def reset(self) -> None:
        from django.db import connection

        with connection.cursor() as cur:
            cur.execute(f"TRUNCATE {TABLE}")

    def close(self) -> None:
        from django.db import connections

        from django_pgqueue.notify import notifier

        notifier.close()
        connections.close_all()

    def enqueue_single(self, n: int) -> None:
        noop = self.tasks.noop
        for _ in range(n):
            noop.enqueue()  # autocommit: one transaction per job

    def enqueue_batch(self, n: int) -> None:
        from django_pgqueue.backend import enqueue_many

        # The job ids, like the peers' bulk calls return (BENCH_RESULTS=1: TaskResults).
        results = os.environ.get("BENCH_RESULTS") == "1"
        enqueue_many(self.tasks.noop, [((), {})] * n, results=results)

    def enqueue_latency_job(self, seq: int, t_enqueue: float) -> None:
        self.tasks.lat.enqueue(seq, t_enqueue)

    def worker_cmds(self, cfg: dict, env: dict) -> list[tuple[list[str], dict]]:
        argv = [
            sys.executable,
            "-m",
            "django",
            "runworkers",
            "--skip-checks",
            "--concurrency",
            str(cfg["concurrency"]),
        ]
        if not cfg.get("notify", True):
            argv.append("--no-notify")
        e = dict(
            env,
            PYTHONPATH=HERE,
            DJANGO_SETTINGS_MODULE="djpgq.settings",
            BENCH_POLL_INTERVAL=str(cfg.get("poll", 1.0)),
        )
        return [(argv, e) for _ in range(cfg["workers"])]

    def cfg_extras(self, cfg: dict) -> dict:
        return {"config": cfg.get("label")}


class DjangoPgQueueChains(DjangoPgQueue):
    """Workflows: the same no-op task, enqueued as chains of 10 steps
    (``django_pgqueue.workflows.chain``), each step released by its parent's
    completion. ``jobs_per_s`` are steps per second; run it beside the plain peer."""

    peer = "django-pgqueue-chains"
    db = f"{DB}_chains"
    remaining_sql = (
        f"SELECT count(*) FROM {TABLE} WHERE status IN ('pending', 'in_progress', 'waiting')"
    )
    has_single = False
    latency_configs: list[dict] = []
    CHAIN = 10

    def reset(self) -> None:
        from django.db import connection

        with connection.cursor() as cur:
            cur.execute(f"TRUNCATE {TABLE}, pgqueue_workflow, pgqueue_workflow_edge")

    def enqueue_batch(self, n: int) -> None:
        from django.db import transaction

        from django_pgqueue.workflows import call, chain

        noop = self.tasks.noop
        with transaction.atomic():
            for _ in range(n // self.CHAIN):
                chain(*(call(noop) for _ in range(self.CHAIN)), name="bench-chain").enqueue()

    def worker_cmds(self, cfg: dict, env: dict) -> list[tuple[list[str], dict]]:
        return [(argv, dict(e, BENCH_DB=self.db)) for argv, e in super().worker_cmds(cfg, env)]


if __name__ == "__main__":
    write_project()
    # Copied as bench_django_pgqueue_chains.py, this file is the workflows peer.
    if os.path.basename(__file__).endswith("_chains.py"):
        os.environ["BENCH_DB"] = DjangoPgQueueChains.db
        harness.main(DjangoPgQueueChains)
    else:
        harness.main(DjangoPgQueue)
