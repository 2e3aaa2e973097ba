"""Throwaway PostgreSQL 15 clusters owned by a test run.

A cluster lives in its own temporary directory, listens on a free loopback port with
trust authentication and is removed by ``cleanup()``. It is never the machine's shared
service on port 5432, so fault tests may crash or restart it freely.
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PG_MAJOR = "15"
DEFAULT_BINDIR = Path(f"/usr/lib/postgresql/{PG_MAJOR}/bin")
SHARED_PORT = 5432
SERVICE_USER = "postgres"


def is_root() -> bool:
    """True when running as uid 0, where PostgreSQL tools must drop to ``postgres``."""
    return os.geteuid() == 0


def as_service_user(cmd: list[str]) -> list[str]:
    """Prefix ``cmd`` with ``runuser -u postgres --`` when running as root.

    initdb, postgres and pgbouncer refuse to run as root, and CI runs as root.
    """
    return ["runuser", "-u", SERVICE_USER, "--", *cmd] if is_root() else cmd


def clean_env() -> dict[str, str]:
    """The environment without PG* variables, so an outer PGHOST/PGPORT can't redirect us."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def free_port() -> int:
    """Ask the kernel for a free loopback TCP port (never 5432)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port != SHARED_PORT:
            return port


def _apt_install(package: str) -> None:
    if not is_root() or shutil.which("apt-get") is None:
        raise RuntimeError(
            f"{package} is not installed; install it with `apt-get install -y {package}`"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, capture_output=True)
    subprocess.run(
        ["apt-get", "install", "-y", "-q", package], check=True, env=env, capture_output=True
    )


def ensure_postgres(bindir: Path | None = None) -> Path:
    """Return the PostgreSQL 15 bin directory, installing ``postgresql-15`` as root if missing.

    ``PGQUEUE_TEST_PG_BINDIR`` overrides the location.
    """
    override = os.environ.get("PGQUEUE_TEST_PG_BINDIR")
    path = Path(override) if override else (bindir or DEFAULT_BINDIR)
    if not (path / "initdb").exists():
        if override:
            raise RuntimeError(f"PGQUEUE_TEST_PG_BINDIR={override} has no initdb")
        _apt_install(f"postgresql-{PG_MAJOR}")
        if not (path / "initdb").exists():
            raise RuntimeError(f"postgresql-{PG_MAJOR} installed but {path}/initdb is missing")
    return path


def wait_until(
    predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.05
) -> None:
    """Poll ``predicate()`` until it is true; raise TimeoutError naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class PgCluster:
    """A private PostgreSQL cluster: ``initdb`` in a temp dir, ``pg_ctl`` to run it.

    ``settings`` are appended to postgresql.conf (e.g. ``{"max_connections": 20}``),
    ``hba`` lines to pg_hba.conf (e.g. trust for a test network namespace's subnet).
    Use as a context manager, or call ``start()`` and ``cleanup()``.
    """

    def __init__(
        self,
        port: int | None = None,
        settings: dict[str, object] | None = None,
        hba: list[str] | None = None,
    ) -> None:
        if port == SHARED_PORT:
            raise ValueError("port 5432 belongs to the machine's shared PostgreSQL service")
        self.port = port or free_port()
        self.settings = dict(settings or {})
        self.hba = list(hba or [])
        self.bindir = ensure_postgres()
        self.basedir = Path(tempfile.mkdtemp(prefix="pgqueue-pg-"))
        self.datadir = self.basedir / "data"
        self.logfile = self.datadir / "postgresql.log"
        self._initialised = False
        self.running = False
        if is_root():
            # The postgres user must own the tree it writes (mkdtemp makes it 0700 root).
            pw = pwd.getpwnam(SERVICE_USER)
            os.chown(self.basedir, pw.pw_uid, pw.pw_gid)
        atexit.register(self.cleanup)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> PgCluster:
        """initdb on first use, then start the server and wait until it accepts connections."""
        if not self._initialised:
            self._initdb()
        self._pg_ctl("start", "-l", str(self.logfile), "-t", "60")
        self.running = True
        self.wait_ready()
        return self

    def stop(self, mode: str = "fast") -> None:
        """Stop the server with ``pg_ctl -m mode`` (smart, fast or immediate)."""
        if self.running:
            self._pg_ctl("stop", "-m", mode, "-t", "60")
            self.running = False

    def crash_restart(self, timeout: float = 60) -> None:
        """Crash-stop (``-m immediate``: no checkpoint) and restart with WAL recovery."""
        self._pg_ctl("restart", "-m", "immediate", "-l", str(self.logfile), "-t", str(int(timeout)))
        self.running = True
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 30) -> None:
        """Wait until ``pg_isready`` reports that the server accepts connections."""

        def ready() -> bool:
            cmd = [str(self.bindir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)]
            # -U/-d name a real role, so probes don't log "role root does not exist".
            cmd += ["-U", "postgres", "-d", "postgres", "-t", "2"]
            return subprocess.run(cmd, env=clean_env(), check=False).returncode == 0

        wait_until(ready, timeout, f"PostgreSQL on port {self.port}", interval=0.1)

    def cleanup(self) -> None:
        """Stop the server (immediately) and delete its directory."""
        try:
            if self.running:
                self.stop("immediate")
        finally:
            shutil.rmtree(self.basedir, ignore_errors=True)
            atexit.unregister(self.cleanup)

    def __enter__(self) -> PgCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    # -- connection strings and helpers ----------------------------------------------------
    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq key=value DSN for ``dbname`` as the ``postgres`` superuser."""
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    def url(self, dbname: str = "postgres") -> str:
        """A ``postgresql://`` URL (the form dj-database-url reads) for ``dbname``."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str) -> str:
        """Create database ``name``; return its DSN."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.dsn(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.dsn(name)

    def terminate_backends(self, application_name_like: str) -> int:
        """``pg_terminate_backend`` every session whose application_name matches; return count."""
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True, connect_timeout=10) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name LIKE %s AND pid <> pg_backend_pid()",
                (application_name_like,),
            ).fetchall()
        return sum(1 for (ok,) in rows if ok)

    @property
    def postmaster_pid(self) -> int:
        """PID of the running postmaster (first line of postmaster.pid)."""
        return int((self.datadir / "postmaster.pid").read_text().split("\n", 1)[0])

    def log_text(self) -> str:
        """The server log so far (for failure messages)."""
        try:
            return self.logfile.read_text(errors="replace")
        except OSError:
            return ""

    # -- internals -------------------------------------------------------------------------
    def _run(self, cmd: list[str]) -> None:
        proc = subprocess.run(
            as_service_user(cmd),
            cwd=self.basedir,  # postgres may not be able to enter the caller's cwd
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}\n"
                f"--- server log ---\n{self.log_text()[-4000:]}"
            )

    def _pg_ctl(self, action: str, *args: str) -> None:
        self._run([str(self.bindir / "pg_ctl"), action, "-D", str(self.datadir), "-w", *args])

    def _initdb(self) -> None:
        self._run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.datadir),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",  # the files are thrown away; fsync at initdb only costs time
            ]
        )
        conf = {
            "port": self.port,
            "listen_addresses": "127.0.0.1",
            # A private socket dir: /var/run/postgresql belongs to the shared service.
            "unix_socket_directories": str(self.basedir),
            **self.settings,
        }
        lines = [f"{key} = '{value}'" for key, value in conf.items()]
        with (self.datadir / "postgresql.conf").open("a") as fh:
            fh.write("\n# test cluster settings\n" + "\n".join(lines) + "\n")
        if self.hba:
            with (self.datadir / "pg_hba.conf").open("a") as fh:
                fh.write("\n".join(self.hba) + "\n")
        self._initialised = True
