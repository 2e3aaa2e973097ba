"""An in-process TCP fault proxy for PostgreSQL connections (toxiproxy semantics).

The proxy runs an asyncio loop in a daemon thread; tests drive it with plain
synchronous calls. Only connections whose DSN was rewritten with ``dsn_for`` go
through it, so assertion queries can keep a direct connection to the server.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

T = TypeVar("T")
_LINGER_RST = struct.pack("ii", 1, 0)  # SO_LINGER {on, 0s}: close() sends RST, not FIN
_CHUNK = 65536


def _rst(writer: asyncio.StreamWriter | None) -> None:
    """Drop a socket with a TCP RST and discard anything still buffered."""
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
        except OSError:
            pass
    writer.transport.abort()


def _fin(writer: asyncio.StreamWriter | None) -> None:
    """Close a socket normally: buffered bytes are flushed, then FIN."""
    if writer is not None and not writer.transport.is_closing():
        writer.close()


class _Link:
    """One proxied client connection and its server-side twin."""

    def __init__(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.client_r, self.client_w = client_r, client_w
        self.server_r: asyncio.StreamReader | None = None
        self.server_w: asyncio.StreamWriter | None = None
        self.bytes_up = 0  # client -> server
        self.bytes_down = 0  # server -> client
        self.closed = False
        self.marker_tail = b""  # last bytes seen upstream, so a marker split over reads matches
        self.cut_armed = False
        self.held = bytearray()  # server reply bytes held back while a cut is armed
        self.scan = 0  # offset of the next unparsed message header in `held`

    def abort(self, server_too: bool = True) -> None:
        self.closed = True
        _rst(self.client_w)
        if server_too:
            _rst(self.server_w)
        else:
            _fin(self.server_w)


class FaultProxy:
    """A TCP proxy on 127.0.0.1 in front of ``target_host:target_port`` with injectable faults.

    Toxics apply to every proxied connection until cleared with ``reset()``. Counters
    (``connections``, ``connections_total``, ``bytes_upstream``, ``bytes_downstream``,
    ``cuts``) are written by the proxy thread and may be read from the test thread.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target_host, self.target_port = target_host, target_port
        self.port: int = 0
        self.connections_total = 0
        self.bytes_upstream = 0
        self.bytes_downstream = 0
        self.cuts = 0
        self._links: set[_Link] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None
        self._flowing: asyncio.Event | None = None
        self._latency: tuple[float, float, str] = (0.0, 0.0, "downstream")
        self._limit: tuple[int, str] | None = None
        self._marker: bytes | None = None
        self._cuts_left = 0
        self._cut_happened = threading.Event()

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> int:
        """Start the proxy thread and listener; return the listening port."""
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            try:
                self._flowing = asyncio.Event()
                self._flowing.set()
                loop.run_until_complete(self._listen(0))
            except BaseException as exc:  # reported to start() below
                failure.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            loop.run_forever()
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

        self._thread = threading.Thread(target=run, name="faultproxy", daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("fault proxy did not start within 10 s")
        if failure:
            raise RuntimeError("fault proxy failed to start") from failure[0]
        return self.port

    def stop(self) -> None:
        """Close the listener, RST every proxied connection and stop the thread."""
        if self._thread is None or self._loop is None:
            return
        self._call_async(self._shutdown)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._thread = None

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- toxics (all synchronous; they take effect before returning) ------------------------
    def latency(self, ms: float, jitter: float = 0, direction: str = "downstream") -> None:
        """Delay every chunk by ``ms`` ± ``jitter`` milliseconds.

        ``direction`` is "downstream" (server->client, toxiproxy's default), "upstream" or "both".
        """
        self._check_direction(direction)
        self._call(lambda: setattr(self, "_latency", (ms / 1000, jitter / 1000, direction)))

    def down(self) -> None:
        """Stop listening (new connects get ECONNREFUSED) and RST all open connections."""
        self._call_async(self._down)

    def up(self) -> None:
        """Listen again on the same port after ``down()``."""
        self._call_async(self._up)

    def blackhole(self) -> None:
        """Stop forwarding in both directions but keep every socket open (half-open peers).

        Unlike toxiproxy's ``timeout(0)``, the data is held rather than dropped, so after
        ``unblackhole()`` the stream continues as TCP would after a healed partition.
        """
        self._call(lambda: self._flowing.clear())  # type: ignore[union-attr]

    def unblackhole(self) -> None:
        """Resume forwarding, delivering what was held."""
        self._call(lambda: self._flowing.set())  # type: ignore[union-attr]

    def reset_peer(self) -> None:
        """RST every open connection (both the client and the server side)."""
        self._call(self._abort_all)

    def limit_data(self, nbytes: int, direction: str = "both") -> None:
        """Close each connection (FIN) once ``nbytes`` have been forwarded in ``direction``.

        Bytes are counted per connection from its start, as toxiproxy's ``limit_data`` does.
        """
        self._check_direction(direction)
        self._call(lambda: setattr(self, "_limit", (nbytes, direction)))

    def cut_after_marker(self, marker: bytes, times: int = 1) -> None:
        """Make the next ``times`` transactions containing ``marker`` ambiguous commits.

        Once a client sends bytes containing ``marker`` (in a Query or Parse message), its
        traffic still reaches the server, so the statement and its COMMIT run. Server replies
        are relayed while the transaction is open (ReadyForQuery status T/E), so the client can
        go on to send COMMIT; the reply that ends it (ReadyForQuery status I) is withheld and
        the client socket is RST instead. The server side gets a normal FIN afterwards.
        """
        if not marker:
            raise ValueError("marker must not be empty")
        self._cut_happened.clear()

        def arm() -> None:
            self._marker, self._cuts_left = marker, times

        self._call(arm)

    def wait_for_cut(self, timeout: float) -> bool:
        """Block until a ``cut_after_marker`` cut has happened; False on timeout."""
        return self._cut_happened.wait(timeout)

    def reset(self) -> None:
        """Remove all toxics (and restore the listener if it is down)."""

        async def clear() -> None:
            self._latency = (0.0, 0.0, "downstream")
            self._limit, self._marker, self._cuts_left = None, None, 0
            self._flowing.set()  # type: ignore[union-attr]
            if self._server is None:
                await self._up()

        self._call_async(clear)

    # -- helpers ---------------------------------------------------------------------------
    @property
    def connections(self) -> int:
        """Number of currently open proxied connections."""
        return len(self._links)

    @property
    def bytes(self) -> int:
        """Total bytes forwarded in both directions."""
        return self.bytes_upstream + self.bytes_downstream

    def dsn_for(self, dsn: str) -> str:
        """Return ``dsn`` (URL or key=value conninfo) with host/port pointing at the proxy."""
        if not self.port:
            raise RuntimeError("start() the proxy before asking for a DSN")
        if dsn.startswith(("postgresql://", "postgres://")):
            parts = urlsplit(dsn)
            user, at, _ = parts.netloc.rpartition("@")
            query = [
                (k, v) for k, v in parse_qsl(parts.query) if k not in ("host", "hostaddr", "port")
            ]
            netloc = f"{user}{at}127.0.0.1:{self.port}"
            return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query)))
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(dsn)
        params.pop("hostaddr", None)
        params.update(host="127.0.0.1", port=str(self.port))
        return make_conninfo("", **params)

    @staticmethod
    def _check_direction(direction: str) -> None:
        if direction not in ("upstream", "downstream", "both"):
            raise ValueError(f"direction must be upstream, downstream or both, not {direction!r}")

    def _call(self, fn: Callable[[], T]) -> T:
        async def wrapper() -> T:
            return fn()

        return self._call_async(wrapper)

    def _call_async(self, fn: Callable[[], Any]) -> Any:
        if self._loop is None or self._thread is None:
            raise RuntimeError("fault proxy is not running")
        return asyncio.run_coroutine_threadsafe(fn(), self._loop).result(timeout=10)

    # -- proxy thread ----------------------------------------------------------------------
    async def _listen(self, port: int) -> None:
        self._server = await asyncio.start_server(
            self._on_client, "127.0.0.1", port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _up(self) -> None:
        if self._server is None:
            await self._listen(self.port)

    async def _down(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        self._abort_all()

    def _abort_all(self) -> None:
        for link in list(self._links):
            link.abort()
        # Forget them now so `connections` is 0 when the call returns, not a tick later.
        self._links.clear()

    async def _shutdown(self) -> None:
        await self._down()

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _Link(reader, writer)
        self._links.add(link)
        self.connections_total += 1
        try:
            try:
                link.server_r, link.server_w = await asyncio.wait_for(
                    asyncio.open_connection(self.target_host, self.target_port), 10
                )
            except (OSError, TimeoutError):
                link.abort()
                return
            if link.closed:  # down()/reset_peer() ran while we were connecting
                link.abort()
                return
            pumps = [
                asyncio.create_task(self._pump(link, upstream=True)),
                asyncio.create_task(self._pump(link, upstream=False)),
            ]
            try:
                # PostgreSQL never half-closes, so one direction ending ends the link.
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in pumps:
                    task.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
            if not link.closed:
                link.closed = True
                _fin(link.client_w)
                _fin(link.server_w)
        finally:
            if not link.closed:  # cancelled by stop()
                link.abort()
            self._links.discard(link)

    async def _pump(self, link: _Link, upstream: bool) -> None:
        src = link.client_r if upstream else link.server_r
        dst = link.server_w if upstream else link.client_w
        assert src is not None and dst is not None and self._flowing is not None
        name = "upstream" if upstream else "downstream"
        try:
            while not link.closed:
                data = await src.read(_CHUNK)
                if not data:
                    return
                await self._flowing.wait()
                delay, jitter, lat_dir = self._latency
                if delay and lat_dir in (name, "both"):
                    await asyncio.sleep(max(0.0, delay + random.uniform(-jitter, jitter)))
                if link.closed:
                    return
                if upstream:
                    self._watch_marker(link, data)
                elif link.cut_armed:
                    data, cut = self._screen_reply(link, data)
                    if cut:
                        self.cuts += 1
                        link.abort(server_too=False)
                        self._cut_happened.set()
                        return
                close_after = False
                if self._limit is not None and self._limit[1] in (name, "both"):
                    sent = link.bytes_up + link.bytes_down
                    if self._limit[1] != "both":
                        sent = link.bytes_up if upstream else link.bytes_down
                    room = max(0, self._limit[0] - sent)
                    if len(data) >= room:
                        data, close_after = data[:room], True
                if data:
                    dst.write(data)
                    await dst.drain()
                    if upstream:
                        link.bytes_up += len(data)
                        self.bytes_upstream += len(data)
                    else:
                        link.bytes_down += len(data)
                        self.bytes_downstream += len(data)
                if close_after:
                    return
        except (ConnectionError, OSError):
            return

    def _watch_marker(self, link: _Link, data: bytes) -> None:
        marker = self._marker
        if marker is None or link.cut_armed or self._cuts_left <= 0:
            return
        window = link.marker_tail + data
        if marker in window:
            link.cut_armed = True
            self._cuts_left -= 1
            link.held.clear()
            link.scan = 0
        link.marker_tail = window[-(len(marker) - 1) :] if len(marker) > 1 else b""

    @staticmethod
    def _screen_reply(link: _Link, data: bytes) -> tuple[bytes, bool]:
        """Split server bytes into what may be relayed now, and whether to cut the client.

        Backend messages are a type byte plus an int32 length that includes itself;
        ReadyForQuery ('Z') carries the transaction status: I idle, T in a block, E failed.
        """
        link.held += data
        relay = b""
        while len(link.held) - link.scan >= 5:
            kind = link.held[link.scan]
            (length,) = struct.unpack_from("!i", link.held, link.scan + 1)
            if length < 4:  # not a framed stream: give up screening rather than corrupt it
                relay, link.cut_armed = bytes(link.held), False
                link.held.clear()
                return relay, False
            end = link.scan + 1 + length
            if end > len(link.held):
                break
            if kind == ord("Z"):
                if link.held[link.scan + 5] == ord("I"):
                    return b"", True
                relay += bytes(link.held[:end])
                del link.held[:end]
                link.scan = 0
            else:
                link.scan = end
        return relay, False
