"""The demo webhook receiver, for assertions: what it reports includes every answered request.

``testproject.demo.receivers.Receiver`` records a request after its route has written
the response, so a sender can hold the 2xx (and a worker can have written the outcome)
while the handler thread has not recorded the request yet; a test reading ``hits()``
at that moment saw one request too few. Here a request counts as in flight from the
moment its handler starts, which is before any response can reach the sender, and
``hits()`` / ``requests`` first wait for the requests in flight at the time of the
call to be recorded.
"""

from __future__ import annotations

import itertools

from testproject.demo import receivers

#: How long a read waits for in-flight requests; only a route that hangs takes this long.
SETTLE_SECONDS = 10.0


class _TrackedHandler(receivers._Handler):
    def do_POST(self) -> None:
        receiver: Receiver = self.server.receiver  # type: ignore[attr-defined]
        ticket = receiver._begin()
        try:
            super().do_POST()
        finally:
            receiver._end(ticket)


class Receiver(receivers.Receiver):
    """``receivers.Receiver`` whose reads never miss a request that was answered."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._tickets = itertools.count()
        self._in_flight: set[int] = set()
        self._recorded: list[receivers.Request] = []
        super().__init__(host, port)
        # No request can arrive yet: nobody has the URL.
        self.server.RequestHandlerClass = _TrackedHandler

    def _begin(self) -> int:
        with self.changed:
            ticket = next(self._tickets)
            self._in_flight.add(ticket)
            return ticket

    def _end(self, ticket: int) -> None:
        with self.changed:
            self._in_flight.discard(ticket)
            self.changed.notify_all()

    def settle(self, timeout: float = SETTLE_SECONDS) -> None:
        """Wait until the requests in flight now are recorded (later ones are not waited for)."""
        with self.changed:
            waiting = set(self._in_flight)
            if not self.changed.wait_for(lambda: not waiting & self._in_flight, timeout):
                raise AssertionError(
                    f"{len(waiting & self._in_flight)} request(s) still being answered "
                    f"after {timeout:.0f}s"
                )

    @property  # type: ignore[override]
    def requests(self) -> list[receivers.Request]:
        self.settle()
        with self.lock:
            return list(self._recorded)

    @requests.setter
    def requests(self, value: list[receivers.Request]) -> None:
        self._recorded = value

    def record(self, request: receivers.Request) -> None:
        with self.changed:
            self._recorded.append(request)
            self.changed.notify_all()

    def hits(self, path: str) -> list[receivers.Request]:
        return [r for r in self.requests if r.path == path]
