"""Schemathesis against the live HTTP API: every documented operation, no 5xx, and
every response matching the OpenAPI document the API serves.

Run it through the dev environment (leg 1 of .ci/run does):

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/pgqueue_ci \\
      python3 scripts/dev.py shell -- python scripts/api_schemathesis.py

It creates a scratch database beside DATABASE_URL's (``<name>_api``), migrates it,
makes an API key holding every scope, starts gunicorn (several worker processes)
serving the test project on it, and runs ``st run`` on the API's ``openapi.json``
with the checks ``not_a_server_error`` and ``response_schema_conformance``. The
database is seeded first (applications, endpoints, events and their deliveries, two
job queues, jobs succeeded, dead, with progress and waiting), and half of the
generated ``{id}``, ``{uid}`` and ``{name}`` path values are drawn from the seeded
objects (a Schemathesis dictionary), so the operations on one object reach past
their 404 to the real work and its 2xx responses. The
number of test cases per operation is bounded (``--max-examples``, default 20) to
keep the run within a couple of minutes. Afterwards the run's report must name every
operation of the document, or the script fails. The server and the database are
removed at the end (``--keep`` keeps the database). The exit status is Schemathesis'
own, or 1 when an operation was not tested.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from django_pgqueue.bench.server import Server  # noqa: E402

MOUNT = "/webhooks/api"
CHECKS = "not_a_server_error,response_schema_conformance"
#: Made in the scratch database before the run; prints the ids and uids as JSON.
SEED = """
import json
from django_pgqueue import queues, send_event
from django_pgqueue.models import Application, Delivery, Endpoint
apps = [Application.objects.create(uid=uid, name=uid) for uid in ("st_acme", "st_globex")]
endpoints = [
    Endpoint.objects.create(
        url=f"http://127.0.0.1:9/hook-{i}", application=apps[0] if i % 3 == 0 else None
    )
    for i in range(10)
]
for n in range(4):
    send_event("order.paid", {"order_id": n})
send_event("order.paid", {"order_id": 99}, application="st_acme")
ids = [e.pk for e in endpoints] + list(Delivery.objects.values_list("pk", flat=True))
# Jobs in every outcome GET /jobs/{id} renders: a result, an error, progress, waiting.
from django_pgqueue.testing import run_queued_jobs
from testproject.demo import tasks
done = [tasks.add.enqueue(2, 3), tasks.always_fails.enqueue(7),
        tasks.report_progress.enqueue([[0.5, "half"]])]
run_queued_jobs()
ids += [int(r.id) for r in done] + [int(tasks.add.enqueue(1, 1).id)]
names = ["st_reports", "st_tenants"]
queues.configure(names[0], concurrency=3)
queues.pause(names[1])
print(json.dumps({"ids": sorted(set(ids)), "uids": [a.uid for a in apps], "names": names}))
"""
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def say(msg: str) -> None:
    print(f"--> {msg}", flush=True)


def scratch_url(base: str, suffix: str = "_api") -> tuple[str, str, str]:
    """(scratch URL, its database name, the URL of the server's ``postgres`` database)."""
    parts = urllib.parse.urlsplit(base)
    name = (parts.path.lstrip("/") or "postgres") + suffix
    url = urllib.parse.urlunsplit(parts._replace(path=f"/{name[:63]}"))
    admin = urllib.parse.urlunsplit(parts._replace(path="/postgres"))
    return url, name[:63], admin


def manage(url: str, *args: str) -> str:
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "testproject.settings"}
    proc = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def operations(document: dict) -> set[str]:
    """``METHOD /path`` of every operation the OpenAPI document declares."""
    return {
        f"{method.upper()} {path}"
        for path, item in (document.get("paths") or {}).items()
        for method in item
        if method in METHODS
    }


def statuses(report: Path) -> dict[str, dict[int, int]]:
    """``METHOD /path`` -> {HTTP status: responses} of every operation the run's ndjson
    events say was tested (a scenario that finished other than skipped)."""
    seen: dict[str, dict[int, int]] = {}
    for line in report.read_text().splitlines():
        try:
            event = json.loads(line).get("ScenarioFinished")
        except (ValueError, AttributeError):
            continue
        if not isinstance(event, dict) or event.get("status") == "skip":
            continue
        recorder = event.get("recorder") or {}
        label = recorder.get("label")
        interactions = recorder.get("interactions") or {}
        if not isinstance(label, str) or not interactions:
            continue
        counts = seen.setdefault(label, {})
        for interaction in interactions.values():
            status = ((interaction or {}).get("response") or {}).get("status_code")
            if isinstance(status, int):
                counts[status] = counts.get(status, 0) + 1
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-examples", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("extra", nargs="*", help="more arguments for `st run`")
    args = parser.parse_args()

    base = os.environ.get("DATABASE_URL")
    if not base:
        raise SystemExit("DATABASE_URL is not set (run through scripts/dev.py shell)")
    url, name, admin = scratch_url(base)
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(drop)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    server = None
    reports = Path(tempfile.mkdtemp(prefix="pgqueue-schemathesis-"))
    try:
        say(f"migrating the scratch database {name}")
        manage(url, "migrate", "--no-input", "-v", "0")
        key = manage(
            url,
            *("pgqueue_api_key", "create", "--name", "schemathesis"),
            *("--scope", "send", "--scope", "read", "--scope", "manage", "--scope", "secrets"),
            *("--scope", "queues", "--scope", "jobs"),
            # Thousands of requests in a minute: the limit must not turn them into 429s.
            *("--rate-limit", "1000000"),
        )
        key = key.strip().splitlines()[-1].strip()
        seeded = json.loads(manage(url, "shell", "-c", SEED).strip().splitlines()[-1])
        config = reports / "schemathesis.toml"
        config.write_text(
            "[dictionaries.ids]\n"
            f"values = {json.dumps(seeded['ids'])}\n"
            "[dictionaries.uids]\n"
            f"values = {json.dumps(seeded['uids'])}\n"
            "[dictionaries.names]\n"
            f"values = {json.dumps(seeded['names'])}\n"
            "[parameters]\n"
            '"path.id" = { dictionary = "ids", probability = 0.5 }\n'
            '"path.uid" = { dictionary = "uids", probability = 0.5 }\n'
            '"path.name" = { dictionary = "names", probability = 0.5 }\n'
        )
        server = Server(
            workers=args.workers,
            threads=2,
            cwd=ROOT,
            env={"DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "testproject.settings"},
        )
        schema_url = server.url(f"{MOUNT}/openapi.json")
        server.start(f"{MOUNT}/openapi.json")
        with urllib.request.urlopen(schema_url, timeout=10) as response:
            document = json.load(response)
        declared = operations(document)
        say(f"gunicorn on port {server.port}; {len(declared)} documented operations")
        st = shutil.which("st", path=str(Path(sys.executable).parent)) or "st"
        ndjson = reports / "events.ndjson"
        argv = [
            st,
            "--config-file",
            str(config),
            "run",
            schema_url,
            "--url",
            server.url(MOUNT),
            "--header",
            f"Authorization: Bearer {key}",
            "--checks",
            CHECKS,
            "--max-examples",
            str(args.max_examples),
            "--request-timeout",
            "20",
            "--seed",
            os.environ.get("SCHEMATHESIS_SEED", str(int(time.time()))),
            "--report",
            "ndjson",
            "--report-ndjson-path",
            str(ndjson),
            "--no-color",
            *args.extra,
        ]
        say("$ " + " ".join(a if "Bearer" not in a else "Authorization: Bearer ***" for a in argv))
        code = subprocess.run(argv, cwd=reports, check=False).returncode
        tested = statuses(ndjson) if ndjson.exists() else {}
        for label in sorted(tested):
            counts = ", ".join(f"{k}: {v}" for k, v in sorted(tested[label].items()))
            print(f"    {label:<36} {counts}")
        missing = sorted(declared - set(tested))
        if missing:
            say(f"operations Schemathesis did not test: {', '.join(missing)}")
            code = code or 1
        else:
            say(f"all {len(declared)} documented operations were tested")
        if code:
            say(f"server log (last lines):\n{server.log_text()[-3000:]}")
        return code
    finally:
        if server is not None:
            server.close()
        shutil.rmtree(reports, ignore_errors=True)
        if not args.keep:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(drop)


if __name__ == "__main__":
    sys.exit(main())
