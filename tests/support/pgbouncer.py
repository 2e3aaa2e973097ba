"""A throwaway PgBouncer (Debian's ``pgbouncer`` package) in front of a test cluster.

Debian 12 ships PgBouncer 1.18, which has no prepared-statement support in transaction
mode: connect through it with psycopg's ``prepare_threshold=None``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

try:  # importable both as tests.support.pgbouncer and as a top-level module
    from .pgcluster import SERVICE_USER, _apt_install, clean_env, free_port, is_root, wait_until
except ImportError:
    from pgcluster import (  # type: ignore[no-redef]
        SERVICE_USER,
        _apt_install,
        clean_env,
        free_port,
        is_root,
        wait_until,
    )

_CANDIDATES = ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")


def ensure_pgbouncer(install: bool = True) -> str:
    """Return the pgbouncer binary path; as root, ``apt-get install`` it if missing.

    Raises RuntimeError with the install command when it is missing and can't be installed.
    """
    found = shutil.which("pgbouncer") or next((p for p in _CANDIDATES if Path(p).exists()), None)
    if found:
        return found
    if not install:
        raise RuntimeError("pgbouncer is not installed; run `apt-get install -y pgbouncer`")
    _apt_install("pgbouncer")
    found = shutil.which("pgbouncer") or next((p for p in _CANDIDATES if Path(p).exists()), None)
    if not found:
        raise RuntimeError("apt-get installed pgbouncer but no pgbouncer binary was found")
    return found


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class PgBouncer:
    """PgBouncer on a free loopback port, pooling ``target_host:target_port``.

    ``dbname`` is mapped explicitly and a ``*`` fallback maps any other name to the
    same-named database on the target. Auth is ``trust`` for the users in ``users``
    (PgBouncer still requires them in its auth file). The admin console is the
    ``pgbouncer`` database, open to ``postgres``.
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        dbname: str,
        pool_mode: str = "transaction",
        pool_size: int = 5,
        users: tuple[str, ...] = ("postgres",),
        settings: dict[str, object] | None = None,
    ) -> None:
        self.target_host, self.target_port, self.dbname = target_host, target_port, dbname
        self.pool_mode, self.pool_size, self.users = pool_mode, pool_size, users
        self.settings = dict(settings or {})
        self.binary = ensure_pgbouncer()
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="pgqueue-bouncer-"))
        self.logfile = self.dir / "pgbouncer.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def _write_config(self) -> Path:
        target = f"host={self.target_host} port={self.target_port}"
        settings = {
            "listen_addr": "127.0.0.1",
            "listen_port": self.port,
            "unix_socket_dir": str(self.dir),
            "auth_type": "trust",
            "auth_file": str(self.dir / "userlist.txt"),
            "admin_users": "postgres",
            "stats_users": "postgres",
            "pool_mode": self.pool_mode,
            "default_pool_size": self.pool_size,
            "max_client_conn": 200,
            "logfile": str(self.logfile),
            "pidfile": str(self.dir / "pgbouncer.pid"),
            # Some drivers send this startup parameter; PgBouncer rejects unknown ones.
            "ignore_startup_parameters": "extra_float_digits",
            **self.settings,
        }
        ini = [
            "[databases]",
            f"{self.dbname} = {target} dbname={self.dbname}",
            f"* = {target}",
            "",
            "[pgbouncer]",
            *(f"{key} = {value}" for key, value in settings.items()),
        ]
        (self.dir / "userlist.txt").write_text("".join(f'"{u}" ""\n' for u in self.users))
        config = self.dir / "pgbouncer.ini"
        config.write_text("\n".join(ini) + "\n")
        if is_root():
            # PgBouncer drops to the service user (-u) and then writes its log and pidfile.
            pw = pwd.getpwnam(SERVICE_USER)
            for path in (self.dir, *self.dir.iterdir()):
                os.chown(path, pw.pw_uid, pw.pw_gid)
        return config

    def start(self, timeout: float = 15) -> PgBouncer:
        """Start PgBouncer in the foreground as a child and wait until it listens."""
        config = self._write_config()
        # PgBouncer refuses to run as root; -u makes it switch after startup, so the child
        # PID is PgBouncer itself and stop() signals exactly the process we started.
        cmd = [self.binary, *(["-u", SERVICE_USER] if is_root() else []), str(config)]
        self.proc = subprocess.Popen(
            cmd,
            cwd=self.dir,
            env=clean_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

        def listening() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"pgbouncer exited with {self.proc.returncode}:\n{self.log_text()}"
                )
            return _port_open(self.port)

        try:
            wait_until(listening, timeout, f"pgbouncer on port {self.port}")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM (immediate shutdown), escalate to SIGKILL, then delete the directory."""
        proc, self.proc = self.proc, None
        try:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PgBouncer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def url(self, dbname: str | None = None, user: str = "postgres") -> str:
        """A ``postgresql://`` URL through the bouncer (``dbname`` defaults to the pooled db)."""
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname or self.dbname}"

    def dsn(self, dbname: str | None = None, user: str = "postgres") -> str:
        """A libpq key=value DSN through the bouncer."""
        return f"host=127.0.0.1 port={self.port} user={user} dbname={dbname or self.dbname}"

    def admin_dsn(self) -> str:
        """DSN of the admin console (``SHOW POOLS``, ``PAUSE``...); it needs simple protocol."""
        return self.dsn("pgbouncer")

    def log_text(self) -> str:
        """PgBouncer's log so far (for failure messages)."""
        try:
            return self.logfile.read_text(errors="replace")
        except OSError:
            return ""
