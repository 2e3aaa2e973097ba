"""NATS JetStream publishing through the official client (nats-py), with publish acks.

Delivered means acked by a stream: a JetStream publish is a request answered by the
stream that stores the subject, and no stream means no responder, which fails the
attempt (``no JetStream stream stores subject ...``). The ``Nats-Msg-Id`` header is the
delivery's ``webhook-id``: within the stream's duplicate window, a retry or a replay
of a message the stream already has is acked as a duplicate and not stored twice.

nats-py is asyncio-only and a NATS connection multiplexes any number of requests, so
the process has one event loop, on a daemon thread, and one connection per server
and user, shared by every delivery thread: a delivery thread hands its publish to
the loop and waits for it, bounded by the total deadline. Reconnects are off: a lost
connection fails the attempt, the queue retries it, and the next publish connects
afresh.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Mapping
from typing import Any

import nats.aio.client
import nats.errors
import nats.js.errors

from .errors import BrokerError
from .urls import BrokerURL

_Key = tuple[str, int, str, str]


class _ConnectFailed(Exception):
    """The connect failed: ``args[0]`` is why (nats-py's first reported error)."""


async def _quiet(*_args: Any) -> None:
    """The client's callbacks: errors reach the attempt log through the publish."""


class _Loop:
    """The process's one NATS event loop, started on first use, and its connections.

    The connections are only touched by coroutines on the loop, so they need no lock;
    a connect in progress is kept as a task, so concurrent first publishes share it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.connections: dict[_Key, asyncio.Task[Any]] = {}

    def run(self, coroutine: Any, timeout: float) -> Any:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(
                    target=self._loop.run_forever, name="pgqueue-nats", daemon=True
                ).start()
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coroutine, timeout), self._loop)
        try:
            # The loop enforces the deadline; the extra second only covers a loop that
            # is itself stuck.
            return future.result(timeout + 1.0)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError from None


_loop = _Loop()


class NatsClient:
    """A delivery thread's handle on the shared loop, with its transport's budgets."""

    def __init__(self, connect_timeout: float, total_timeout: float) -> None:
        self.connect_timeout = connect_timeout
        self.total_timeout = total_timeout

    def close(self) -> None:
        """Nothing to release: the connections are the process's, shared by threads."""

    @staticmethod
    def message_headers(headers: Mapping[str, str]) -> dict[str, str]:
        """The message's headers: the webhook headers, lower-cased, and ``Nats-Msg-Id``
        (the ``webhook-id``), which JetStream de-duplicates on."""
        send = {name.lower(): str(value) for name, value in headers.items()}
        msg_id = send.get("webhook-id")
        if msg_id:
            send["Nats-Msg-Id"] = msg_id
        return send

    def publish(
        self, target: BrokerURL, address: str, body: bytes, headers: Mapping[str, str]
    ) -> str:
        try:
            ack = _loop.run(self._publish(target, address, body, headers), self.total_timeout)
        except Exception as exc:
            raise BrokerError(_describe(exc, target, self)) from None
        duplicate = " (duplicate: already stored)" if ack.duplicate else ""
        return f"acked by stream {ack.stream!r} at sequence {ack.seq}{duplicate}"

    async def _connection(self, target: BrokerURL, address: str) -> Any:
        key = (address, target.port, target.username, target.password)
        task = _loop.connections.get(key)
        if (
            task is not None
            and task.done()
            and (task.cancelled() or task.exception() is not None or not task.result().is_connected)
        ):
            task = None
        if task is None:
            task = asyncio.ensure_future(self._connect(target, address))
            _loop.connections[key] = task
        try:
            return await asyncio.shield(task)
        except BaseException:
            if _loop.connections.get(key) is task and task.done():
                del _loop.connections[key]
            raise

    async def _connect(self, target: BrokerURL, address: str) -> Any:
        """Connect once: the first error ends the attempt.

        nats-py tries a refused server again and again until its caller gives up, even
        without reconnects, telling only its error callback: the first error it reports
        is the answer, and the connect is cancelled.
        """
        first_error: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()

        async def on_error(exc: BaseException) -> None:
            if not first_error.done():
                first_error.set_result(exc)

        client = nats.aio.client.Client()
        connect = asyncio.ensure_future(
            client.connect(
                servers=[f"nats://{address}:{target.port}"],
                user=target.username or None,
                password=target.password or None,
                name="django-pgqueue",
                # Typed int, used as asyncio's timeout: a float works.
                connect_timeout=self.connect_timeout,  # type: ignore[arg-type]
                allow_reconnect=False,
                max_reconnect_attempts=0,
                error_cb=on_error,
                disconnected_cb=_quiet,
                closed_cb=_quiet,
            )
        )
        waiting: set[asyncio.Future[Any]] = {connect, first_error}
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if connect.done():
                connect.result()
                return client
            raise _ConnectFailed(first_error.result())
        except BaseException as exc:
            connect.cancel()
            # Release the socket a failed or cancelled connect leaves open.
            with contextlib.suppress(Exception):
                await client.close()
            if isinstance(exc, asyncio.CancelledError | _ConnectFailed):
                raise
            raise _ConnectFailed(exc) from None

    async def _publish(
        self, target: BrokerURL, address: str, body: bytes, headers: Mapping[str, str]
    ) -> Any:
        connection = await self._connection(target, address)
        send = self.message_headers(headers)
        return await connection.jetstream().publish(
            target.subject, body, timeout=self.total_timeout, headers=send
        )


def _describe(exc: BaseException, target: BrokerURL, client: NatsClient) -> str:
    if isinstance(exc, _ConnectFailed):
        cause = exc.args[0]
        if isinstance(cause, asyncio.TimeoutError | nats.errors.TimeoutError):
            return f"connect timeout ({client.connect_timeout:g} s)"
        return _describe(cause, target, client)
    if isinstance(exc, nats.js.errors.NoStreamResponseError | nats.errors.NoRespondersError):
        return f"no JetStream stream stores subject {target.subject!r}"
    if isinstance(exc, nats.js.errors.APIError):
        return f"refused by JetStream: {exc.code} {exc.description}"
    if isinstance(exc, asyncio.TimeoutError | nats.errors.TimeoutError):
        return f"total deadline of {client.total_timeout:g} s exceeded"
    if isinstance(exc, nats.errors.NoServersError | ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, nats.errors.AuthorizationError):
        return "login refused by the server (user name or password)"
    if isinstance(exc, OSError | nats.errors.Error):
        return f"connection error: {type(exc).__name__}: {exc}"
    return f"NATS error: {type(exc).__name__}: {exc}"
