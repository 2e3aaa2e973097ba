"""Run a command with a PostgreSQL database available in ``DATABASE_URL``.

    python scripts/with_db.py [--migrate] [--] <command...>

Runs inside the project's virtualenv (``scripts/dev.py`` starts it). The database:

* ``DATABASE_URL`` set: used as is; the database is created if it does not exist.
* otherwise: an embedded PostgreSQL (the ``pgserver`` package) with its data in
  ``.pgdata/`` at the repository root. It listens on 127.0.0.1 (a free port,
  54329 when available) and on a unix socket in ``.pgdata/``; it is stopped when
  this script exits, the data is kept. The command also gets
  ``PGQUEUE_EMBEDDED_PG=1``, ``PGQUEUE_EMBEDDED_PGDATA`` (data folder),
  ``PGQUEUE_EMBEDDED_PGBIN`` (its ``pg_ctl``/``psql`` folder) and
  ``PGQUEUE_EMBEDDED_PGUSER`` (the system user the server runs as; empty when it
  is the current user), so tests can restart or inspect it.

With ``--migrate``, ``manage.py migrate`` runs first. The exit code is the command's.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg

# dev.py (stdlib only, beside this file) owns running a child in the foreground.
from dev import run_child
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
PGDATA = ROOT / ".pgdata"
EMBEDDED_DB = "pgqueue_demo"
PREFERRED_PORT = 54329


def say(msg: str) -> None:
    print(f"==> {msg}", flush=True)


def redact(url: str) -> str:
    """Hide a password in a URL for display."""
    head, sep, tail = url.partition("://")
    if not sep or "@" not in tail.split("/", 1)[0]:
        return url
    creds, _, rest = tail.partition("@")
    user, has_password, _ = creds.partition(":")
    return f"{head}://{user}{':***' if has_password else ''}@{rest}"


# --------------------------------------------------------------------------- database


def ensure_database(url: str, attempts: int = 30) -> None:
    """Create the URL's database when it does not exist (connecting to ``postgres``)."""
    dbname = psycopg.conninfo.conninfo_to_dict(url).get("dbname")
    if not dbname:
        raise SystemExit(f"with_db.py: DATABASE_URL names no database: {redact(url)}")
    last_error: Exception | None = None
    for _ in range(attempts):
        try:
            with psycopg.connect(url, connect_timeout=5):
                return
        except psycopg.OperationalError as exc:
            last_error = exc
            if f'database "{dbname}" does not exist' not in str(exc):
                time.sleep(1)  # the server may still be starting
                continue
        try:
            with psycopg.connect(url, dbname="postgres", autocommit=True, connect_timeout=5) as c:
                say(f"creating database {dbname}")
                c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
            return
        except psycopg.errors.DuplicateDatabase:
            return  # created concurrently by another run
        except psycopg.Error as exc:
            raise SystemExit(
                f"with_db.py: cannot create database {dbname} at {redact(url)}: {exc}"
            ) from exc
    raise SystemExit(f"with_db.py: cannot reach PostgreSQL at {redact(url)}: {last_error}")


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # PostgreSQL binds with SO_REUSEADDR too: a port left in TIME_WAIT is usable.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_port() -> int:
    if port_is_free(PREFERRED_PORT):
        return PREFERRED_PORT
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def prune_stale_handles(pgserver_module: Any) -> None:
    """Forget handles of runs that died without cleaning up (killed with SIGKILL).

    pgserver stops the server when its last handle goes away; a dead process left
    in its handle list would keep the server running forever.
    """
    handles = PGDATA / ".handle_pids.json"
    if not handles.exists():
        return
    with pgserver_module.PostgresServer._lock:
        try:
            pids = json.loads(handles.read_text())
        except (OSError, ValueError):
            return
        alive = [pid for pid in pids if isinstance(pid, int) and pid_alive(pid)]
        if alive != pids:
            handles.write_text(json.dumps(alive))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_embedded() -> tuple[str, dict[str, str]]:
    """Start (or join) the embedded server; return DATABASE_URL and extra environment."""
    # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); the fallback is fine.
    warnings.filterwarnings("ignore", module="platformdirs")
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    try:
        import pgserver
        import pgserver.postgres_server as pg_module
    except ImportError as exc:
        raise SystemExit(
            "with_db.py: DATABASE_URL is not set and pgserver is not installed in this "
            f"virtualenv ({exc}); run through scripts/dev.py or set DATABASE_URL"
        ) from exc

    # pgserver starts postgres with `-h ""` (unix socket only). Listen on 127.0.0.1 as
    # well, so that every client (pgbouncer running as another user, browsers' servers,
    # subprocesses) reaches it the same way as a regular server.
    original_pg_ctl = pg_module.pg_ctl
    port = pick_port()

    def pg_ctl_on_tcp(args: list[str], **kwargs: Any) -> str:
        args = [f"-h 127.0.0.1 -p {port}" if arg == '-h ""' else arg for arg in args]
        return original_pg_ctl(args, **kwargs)

    pg_module.pg_ctl = pg_ctl_on_tcp

    fresh = not (PGDATA / "PG_VERSION").exists()
    say(
        "initialising the embedded PostgreSQL in .pgdata/ (first run)"
        if fresh
        else "starting the embedded PostgreSQL (.pgdata/)"
    )
    prune_stale_handles(pg_module)
    try:
        server = pgserver.get_server(PGDATA, cleanup_mode="stop")
    except Exception as exc:
        log = PGDATA / "log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
        raise SystemExit(
            f"with_db.py: the embedded PostgreSQL did not start: {exc}\n{tail}"
        ) from exc
    info = server.get_postmaster_info()

    if info.port and info.hostname and info.hostname not in ("", "*"):
        host = "127.0.0.1" if info.hostname in ("localhost", "0.0.0.0") else info.hostname
        url = f"postgresql://postgres@{host}:{info.port}/{EMBEDDED_DB}"
    else:  # a server started by other means, on the unix socket only
        socket_dir = quote(str(info.socket_dir), safe="")
        port_part = f":{info.port}" if info.port else ""
        url = f"postgresql://postgres@{socket_dir}{port_part}/{EMBEDDED_DB}"

    extra = {
        "PGQUEUE_EMBEDDED_PG": "1",
        "PGQUEUE_EMBEDDED_PGDATA": str(PGDATA),
        "PGQUEUE_EMBEDDED_PGBIN": str(pg_module.POSTGRES_BIN_PATH),
        "PGQUEUE_EMBEDDED_PGUSER": server.system_user or "",
    }
    return url, extra


# --------------------------------------------------------------------------- running


def run(cmd: list[str], env: dict[str, str]) -> int:
    """Run in the foreground (dev.run_child: Ctrl-C reaches it, SIGTERM is forwarded)."""
    try:
        return run_child(cmd, env)
    except OSError as exc:
        print(f"with_db.py: cannot run {cmd[0]!r}: {exc}", file=sys.stderr)
        return 127


def main(argv: list[str]) -> int:
    migrate = False
    while argv and argv[0].startswith("--"):
        flag = argv.pop(0)
        if flag == "--":
            break
        if flag == "--migrate":
            migrate = True
        else:
            print(f"with_db.py: unknown option {flag}", file=sys.stderr)
            return 2
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2

    env = dict(os.environ)
    url = env.get("DATABASE_URL", "")
    if url:
        say(f"database: {redact(url)} (DATABASE_URL)")
    else:
        url, extra = start_embedded()
        env.update(extra)
        say(f"database: {url} (embedded PostgreSQL)")
    env["DATABASE_URL"] = url
    ensure_database(url)

    if migrate:
        say("applying migrations")
        code = run([sys.executable, "manage.py", "migrate", "--noinput"], env)
        if code != 0:
            say(f"migrate failed with exit code {code}")
            return code
    return run(argv, env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
