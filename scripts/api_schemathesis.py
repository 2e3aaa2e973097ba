"""Schemathesis against the live HTTP API: every documented operation, no 5xx, and
every response matching the OpenAPI document the API serves.

Run it through the dev environment (leg 1 of .ci/run does):

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/pgqueue_ci \\
      python3 scripts/dev.py shell -- python scripts/api_schemathesis.py

It creates a scratch database beside DATABASE_URL's (``<name>_api``), migrates it,
makes an API key holding every scope, starts gunicorn (several worker processes)
serving the test project on it, and runs ``st run`` on the API's ``openapi.json``
with the checks ``not_a_server_error`` and ``response_schema_conformance``. The
number of test cases per operation is bounded (``--max-examples``, default 25) to
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


def tested_operations(report: Path) -> set[str]:
    """``METHOD /path`` of every operation that the run's ndjson events say was tested:
    a scenario that finished other than skipped, with requests recorded."""
    seen: set[str] = set()
    for line in report.read_text().splitlines():
        try:
            event = json.loads(line).get("ScenarioFinished")
        except (ValueError, AttributeError):
            continue
        if isinstance(event, dict) and event.get("status") != "skip":
            recorder = event.get("recorder") or {}
            if recorder.get("interactions") and isinstance(recorder.get("label"), str):
                seen.add(recorder["label"])
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-examples", type=int, default=25)
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
            *("--scope", "send", "--scope", "read", "--scope", "manage"),
            # Thousands of requests in a minute: the limit must not turn them into 429s.
            *("--rate-limit", "1000000"),
        )
        key = key.strip().splitlines()[-1].strip()
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
        missing = sorted(declared - tested_operations(ndjson)) if ndjson.exists() else ["?"]
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
