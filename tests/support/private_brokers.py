"""Brokers owned by one test: a NATS JetStream server and a RabbitMQ node of its own.

The machine's brokers (NATS on 4222, RabbitMQ on 5672) are shared with every other
test run, so a test that kills a broker starts its own: on free loopback ports, with
its store in the test's temporary directory. ``kill()`` is ``kill -9``; ``start()``
again brings it back on the same port and store, as a crashed broker restarted by its
supervisor would come back. Each is stopped for good by ``stop()``.

Absent binaries are the caller's to skip on (:func:`nats_server` and
:func:`rabbitmq_server` return ``None``).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

RABBITMQ_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")


def nats_server() -> str | None:
    return shutil.which("nats-server")


def rabbitmq_server() -> str | None:
    """The server script itself: the distribution's wrapper in /usr/sbin switches to
    the ``rabbitmq`` user and the machine's node settings."""
    if RABBITMQ_SERVER.exists():
        return str(RABBITMQ_SERVER)
    return shutil.which("rabbitmq-server")


def _ephemeral_low() -> int:
    """The lowest port of the kernel's ephemeral range (Linux's default if unreadable)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    """Whether a listener could bind ``port`` now (no SO_REUSEADDR, as a broker may not
    set it: a connection of the killed broker still in TIME_WAIT counts as taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def restartable_port() -> int:
    """A free loopback port below the kernel's ephemeral range, for a broker that is
    killed and started again on the same port. A port from ``free_port()`` is an
    ephemeral one: between the kill and the start, any client connection on the
    machine (the parallel tests open thousands) may take it as its local port, and
    the restarted broker fails with eaddrinuse, as it once did in CI."""
    low = _ephemeral_low()
    rng = random.SystemRandom()
    while True:
        port = rng.randint(min(20000, low - 1000), low - 1)
        if port != 5432 and _bindable(port):
            return port


def _wait_bindable(port: int, timeout: float = 90.0) -> None:
    """Wait (up to TIME_WAIT's 60 s and some) until ``port`` can be bound again."""
    deadline = time.monotonic() + timeout
    while not _bindable(port) and time.monotonic() < deadline:
        time.sleep(0.2)


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"the broker exited ({process.returncode}): {log.read_text()[-2000:]}"
            )
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the broker did not listen on {port} in {timeout:g} s")


class _Broker:
    port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None
    startup_timeout = 30.0

    def command(self) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def start(self) -> None:
        assert self.process is None, "already running"
        _wait_bindable(self.port)  # a restart: the killed broker's sockets may linger
        argv, env = self.command()
        with self.log.open("ab") as out:
            # Its own process group: kill() reaches the broker's children too (beam, epmd
            # helpers), never anything else.
            self.process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        _wait_for_port(self.port, self.process, self.startup_timeout, self.log)
        self.ready()

    def ready(self) -> None:
        """Wait until the broker serves clients, not only accepts connections."""

    def kill(self) -> None:
        """``kill -9`` the broker (its whole process group) and wait for it to be gone."""
        process, self.process = self.process, None
        if process is None:
            return
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(30)
        self.wait_closed()

    def wait_closed(self) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
            except OSError:
                return
            time.sleep(0.05)

    def stop(self) -> None:
        self.kill()


class PrivateNats(_Broker):
    """``nats-server -js`` on a free port with its JetStream store in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.binary = nats_server()
        assert self.binary is not None
        self.port = restartable_port()
        self.store = directory / "jetstream"
        self.log = directory / "nats.log"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def command(self) -> tuple[list[str], dict[str, str]]:
        argv = [self.binary or "nats-server", "-js", "-sd", str(self.store)]
        argv += ["-a", "127.0.0.1", "-p", str(self.port)]
        return argv, dict(os.environ)


class PrivateRabbit(_Broker):
    """A RabbitMQ node of its own: its own node name, AMQP and distribution ports,
    database directory, logs, cookie (``HOME``), no plugins and no machine config."""

    startup_timeout = 60.0

    def __init__(self, directory: Path) -> None:
        self.binary = rabbitmq_server()
        assert self.binary is not None
        self.directory = directory
        self.port = restartable_port()
        self.dist_port = restartable_port()
        self.node = f"pgqtest{self.port}@localhost"
        self.log = directory / "rabbit.out"
        (directory / "rabbitmq.conf").write_text("")
        (directory / "enabled_plugins").write_text("[].\n")

    def url(self, exchange: str, routing_key: str) -> str:
        return (
            f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
            f"?exchange={exchange}&routing_key={routing_key}"
        )

    def command(self) -> tuple[list[str], dict[str, str]]:
        d = self.directory
        env = {
            **os.environ,
            "HOME": str(d),  # the Erlang cookie
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_CONF_ENV_FILE": str(d / "rabbitmq-env.conf"),
            "RABBITMQ_PID_FILE": str(d / "rabbit.pid"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }
        return [self.binary or "rabbitmq-server"], env

    def ready(self) -> None:
        # The listener opens before the node has finished booting: wait for a login.
        import pika

        deadline = time.monotonic() + self.startup_timeout
        while True:
            try:
                pika.BlockingConnection(
                    pika.ConnectionParameters("127.0.0.1", self.port, connection_attempts=1)
                ).close()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
