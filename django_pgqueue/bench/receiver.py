"""A minimal keep-alive webhook receiver for the benchmark, run as its own process.

``python -m django_pgqueue.bench.receiver`` prints the port it listens on and
answers every POST with ``204 No Content`` until killed; a POST to ``/slow/<seconds>``
is answered after that many seconds (a slow receiver). It needs no Django, so
neither the worker nor the raw ``requests`` loop shares a GIL with it.
"""

from __future__ import annotations

import http.server
import socket
import sys
import time
from typing import Any


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if self.path.startswith("/slow/"):
            time.sleep(float(self.path.rsplit("/", 1)[1]))
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()


def main() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    sys.stdout.write(f"{server.server_address[1]}\n")
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
