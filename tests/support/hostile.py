"""A hostile webhook receiver on 127.0.0.1, written on raw sockets.

``tests.support.receiver.Receiver`` is a polite HTTP/1.1 server; this one answers each request
path with a *behaviour* that decides, byte by byte, what goes back on the socket: a
response no HTTP library would write (malformed status lines and headers, NUL and
control bytes), bodies that never end or expand, a status line dripped one byte at a
time, a TCP reset, a kept-alive connection closed just as the next request arrives.

Every request it reads is recorded (``seen``) with the serial number of its TCP
connection and its place on that connection, so a test can tell a resend on a fresh
connection from a duplicate delivery.
"""

from __future__ import annotations

import gzip
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache

#: The most a request head may take; the sender under test writes small ones.
MAX_HEAD = 64 * 1024
#: How long a stalling behaviour holds a connection at most (the sender's deadline is
#: shorter; this only bounds a test that goes wrong).
HOLD_SECONDS = 30.0


@dataclass
class Seen:
    """One request as the receiver read it."""

    path: str
    headers: dict[str, str]
    body: bytes
    connection: int  # serial number of the TCP connection, from 1
    index: int  # the request's place on its connection, from 0


class Exchange:
    """One request on one connection, and what the behaviour does with the socket."""

    def __init__(self, receiver: HostileReceiver, sock: socket.socket, request: Seen) -> None:
        self.receiver = receiver
        self.sock = sock
        self.request = request
        #: After the behaviour: read the next request on this connection (keep-alive).
        self.keep_alive = True

    def send(self, data: bytes) -> bool:
        """Write ``data``; False once the sender has gone away."""
        try:
            self.sock.sendall(data)
        except OSError:
            self.keep_alive = False
            return False
        return True

    def close(self) -> None:
        """Close the connection with a FIN, as a receiver's idle timeout does."""
        self.keep_alive = False
        _close(self.sock)

    def reset(self) -> None:
        """Close the connection with a TCP reset (RST)."""
        self.keep_alive = False
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        _close(self.sock)

    def hold(self) -> None:
        """Say nothing until the sender gives up (or the receiver stops)."""
        self.keep_alive = False
        self.sock.settimeout(0.2)
        deadline = time.monotonic() + HOLD_SECONDS
        while time.monotonic() < deadline and not self.receiver.stopping.is_set():
            try:
                if not self.sock.recv(65536):
                    break
            except TimeoutError:
                continue
            except OSError:
                break
        _close(self.sock)

    @property
    def stopping(self) -> bool:
        return self.receiver.stopping.is_set()


Behaviour = Callable[[Exchange], None]


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


class HostileReceiver:
    """A threaded raw-socket server on 127.0.0.1: ``routes[path] = behaviour``."""

    def __init__(self) -> None:
        self.routes: dict[str, Behaviour] = {}
        self.seen: list[Seen] = []
        self.connections = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._socks: set[socket.socket] = set()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._accept, name="hostile-accept", daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def hits(self, path: str) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.path == path]

    def close(self) -> None:
        self.stopping.set()
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close does not)
        except OSError:
            pass
        _close(self.listener)
        with self.lock:
            socks = list(self._socks)
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            _close(sock)
        self.thread.join(5)

    def __enter__(self) -> HostileReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- serving ---------------------------------------------------------------------

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                serial = self.connections
                self._socks.add(sock)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(
                target=self._serve, args=(sock, serial), name=f"hostile-{serial}", daemon=True
            ).start()

    def _serve(self, sock: socket.socket, serial: int) -> None:
        buffer = b""
        index = 0
        try:
            while not self.stopping.is_set():
                parsed = _read_request(sock, buffer)
                if parsed is None:
                    return
                path, headers, body, buffer = parsed
                request = Seen(path, headers, body, serial, index)
                with self.lock:
                    self.seen.append(request)
                exchange = Exchange(self, sock, request)
                self.routes.get(path, answer())(exchange)
                if not exchange.keep_alive:
                    return
                index += 1
        finally:
            _close(sock)
            with self.lock:
                self._socks.discard(sock)


def _read_request(
    sock: socket.socket, buffer: bytes
) -> tuple[str, dict[str, str], bytes, bytes] | None:
    """Read one request (head and Content-Length body); None when the sender closed."""
    sock.settimeout(HOLD_SECONDS)
    try:
        while b"\r\n\r\n" not in buffer:
            if len(buffer) > MAX_HEAD:
                return None
            chunk = sock.recv(65536)
            if not chunk:
                return None
            buffer += chunk
        head, _, rest = buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        path = parts[1] if len(parts) > 1 else "/"
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip()] = value.strip()
        length = int(headers.get("Content-Length") or 0)
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            rest += chunk
        return path, headers, rest[:length], rest[length:]
    except (OSError, ValueError):
        return None


# -- behaviours ---------------------------------------------------------------------------


def response(
    status: int | str = 200,
    headers: Iterable[tuple[str, str]] = (),
    body: bytes = b"ok",
    *,
    reason: str = "X",
) -> bytes:
    """A response in bytes; ``headers`` go out as given (latin-1), Content-Length added."""
    lines = [f"HTTP/1.1 {status} {reason}", *(f"{k}: {v}" for k, v in headers)]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def answer(
    status: int | str = 200, headers: Iterable[tuple[str, str]] = (), body: bytes = b"ok"
) -> Behaviour:
    """A well-formed response on a kept-alive connection (without ``Connection: close``)."""
    data = response(status, list(headers), body)

    def behaviour(exchange: Exchange) -> None:
        exchange.send(data)

    return behaviour


def raw(data: bytes, then: str = "close") -> Behaviour:
    """Write ``data`` as it is, then ``close``, ``reset``, ``hold`` or ``keep`` the connection."""

    def behaviour(exchange: Exchange) -> None:
        exchange.send(data)
        if then == "close":
            exchange.close()
        elif then == "reset":
            exchange.reset()
        elif then == "hold":
            exchange.hold()

    return behaviour


def reset() -> Behaviour:
    """Read the request, then reset the connection without a byte of answer."""
    return lambda exchange: exchange.reset()


def stall() -> Behaviour:
    """Read the request, then say nothing at all."""
    return lambda exchange: exchange.hold()


def drip(data: bytes, interval: float = 0.2) -> Behaviour:
    """Slowloris: write ``data`` one byte every ``interval`` seconds."""

    def behaviour(exchange: Exchange) -> None:
        for byte in data:
            if exchange.stopping or not exchange.send(bytes([byte])):
                return
            time.sleep(interval)
        exchange.close()

    return behaviour


def endless(chunk: bytes = b"x" * 65536) -> Behaviour:
    """A 200 with a chunked body that never ends."""

    def behaviour(exchange: Exchange) -> None:
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
        if not exchange.send(head):
            return
        deadline = time.monotonic() + HOLD_SECONDS
        while not exchange.stopping and time.monotonic() < deadline:
            if not exchange.send(frame):
                return
        exchange.close()

    return behaviour


def huge(size: int = 200 * 1024 * 1024, chunk: bytes = b"y" * 65536) -> Behaviour:
    """A 200 announcing (and sending, as long as the sender reads) ``size`` bytes."""

    def behaviour(exchange: Exchange) -> None:
        if not exchange.send(f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n".encode()):
            return
        sent = 0
        while sent < size and not exchange.stopping:
            if not exchange.send(chunk):
                return
            sent += len(chunk)

    return behaviour


@lru_cache(maxsize=1)
def gzip_bomb_body() -> bytes:
    """About 100 KB that gunzip to 100 MB of zeros."""
    return gzip.compress(b"\0" * (100 * 1024 * 1024), compresslevel=9)


def gzip_bomb() -> Behaviour:
    """A 200 whose body claims ``Content-Encoding: gzip`` and expands a thousandfold."""
    body = gzip_bomb_body()  # compressed now, not while a sender waits

    def behaviour(exchange: Exchange) -> None:
        exchange.send(
            response(
                200,
                [("Content-Encoding", "gzip"), ("Content-Type", "application/json")],
                body,
            )
        )

    return behaviour


def stale_keep_alive() -> Behaviour:
    """Answer the first request of a connection, keep it open, and close it (FIN, no
    answer) when the next request arrives: a receiver whose idle timeout fires as a
    sender reuses the connection, without ever having said ``Connection: close``."""
    ok = response(200, [("Content-Type", "application/json")], b'{"ok":true}')

    def behaviour(exchange: Exchange) -> None:
        if exchange.request.index == 0:
            exchange.send(ok)
        else:
            exchange.close()

    return behaviour
