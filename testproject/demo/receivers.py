"""Tiny webhook receivers on 127.0.0.1 for the demo and the tests.

``Receiver`` is a threaded HTTP/1.1 server (keep-alive) that records every request
and answers through a per-path *route*: a function ``route(handler, request)``.
Routes for the demo: ``verifying`` (checks the signature with
``django_pgqueue.webhooks.verify``), ``flaky`` (fails the first N requests) and
``status`` (always answers one status, e.g. 500 for a dead receiver).
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django_pgqueue.webhooks import WebhookVerificationError, verify


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes
    verified: bool | None = None


Route = Callable[["_Handler", Request], None]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like real receivers

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without NODELAY, Nagle's
        # algorithm meets the client's delayed ACK and each response waits ~40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        receiver: Receiver = self.server.receiver  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if len(body) < length:
            # The sender died mid-request: a real receiver would not process this either.
            self.close_connection = True
            return
        request = Request(self.path, dict(self.headers.items()), body)
        route = receiver.routes.get(self.path, ok)
        try:
            route(self, request)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            receiver.record(request)

    def answer(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Receiver:
    """A threaded HTTP server on 127.0.0.1 that records what it receives."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server((host, port), _Handler)
        self.server.receiver = self  # type: ignore[attr-defined]
        self.host, self.port = host, self.server.server_address[1]
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def url(self, path: str = "/") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def record(self, request: Request) -> None:
        with self.changed:
            self.requests.append(request)
            self.changed.notify_all()

    def hits(self, path: str) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.path == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- routes -------------------------------------------------------------------------


def ok(handler: _Handler, request: Request) -> None:
    handler.answer(200, b'{"ok":true}', {"Content-Type": "application/json"})


def status(code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Route:
    """Always answer ``code`` (a dead receiver: ``status(500)``)."""

    def route(handler: _Handler, request: Request) -> None:
        handler.answer(code, body, headers)

    return route


def flaky(failures: int, code: int = 500) -> Route:
    """Answer ``code`` to the first ``failures`` requests, then 200."""
    seen = {"n": 0}
    lock = threading.Lock()

    def route(handler: _Handler, request: Request) -> None:
        with lock:
            seen["n"] += 1
            failing = seen["n"] <= failures
        if failing:
            handler.answer(code, b"temporarily broken")
        else:
            ok(handler, request)

    return route


def verifying(secret: Callable[[], str] | str) -> Route:
    """Check the signature with our ``verify``: 204 when valid, 401 when not."""

    def route(handler: _Handler, request: Request) -> None:
        key = secret() if callable(secret) else secret
        try:
            verify(key, request.body, request.headers)
        except WebhookVerificationError as exc:
            request.verified = False
            handler.answer(401, json.dumps({"error": str(exc)}).encode())
            return
        request.verified = True
        handler.answer(204)

    return route


def free_port() -> int:
    """A local port with nothing listening on it (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
