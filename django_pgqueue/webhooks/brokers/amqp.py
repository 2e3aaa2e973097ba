"""RabbitMQ (AMQP 0-9-1) publishing through pika, with publisher confirms.

Delivered means confirmed: the channel is in confirm mode and every publish is
``mandatory``, so pika's blocking publish returns only when the broker acked the
message and raises when it nacked it (``NackError``) or could route it to no queue
(``UnroutableError``, the ``basic.return`` of a mandatory publish). An unknown
exchange closes the channel (404 NOT_FOUND). All of these, a refused login, a lost
connection or a timeout become a :class:`~.BrokerError` with a message for the
attempt log: the delivery is retried and the endpoint's breaker counts it.

Connections are kept per (address, port, virtual host, user) between deliveries and
dropped after any error. Heartbeats are off: a blocking connection only services them
while it is in use, so an idle kept connection would be closed by the broker for a
missed heartbeat; a dead kept connection is found on the next publish instead, which is
then sent once more on a fresh connection (like the HTTP transport's stale kept-alive
connection). The resend may duplicate a message the broker did take, with the same
``message_id``, which consumers de-duplicate on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import pika
import pika.exceptions as errors

from ..deadlines import _Deadline, _watchdog
from .errors import BrokerError
from .urls import BrokerURL

_Key = tuple[str, int, str, str, str]


class _Socket:
    """The socket of a pika connection, as the deadline watchdog wants it (``.sock``).

    pika does not expose it: this reads its transport's attribute, and finds nothing
    (the deadline then does not cut, the socket timeouts still apply) if that changes.
    """

    def __init__(self, connection: Any) -> None:
        self._connection = connection

    @property
    def sock(self) -> Any:
        transport = getattr(getattr(self._connection, "_impl", None), "_transport", None)
        return getattr(transport, "_sock", None)


class AmqpClient:
    def __init__(self, connect_timeout: float, total_timeout: float) -> None:
        self.connect_timeout = connect_timeout
        self.total_timeout = total_timeout
        self._channels: dict[_Key, tuple[Any, Any]] = {}

    def close(self) -> None:
        for key in list(self._channels):
            self._drop(key)

    def __del__(self) -> None:
        # A worker's delivery thread ends without closing its transport: its
        # connections close when the thread's transport goes, not at interpreter exit.
        self.close()

    def _drop(self, key: _Key) -> None:
        connection, _ = self._channels.pop(key, (None, None))
        if connection is not None:
            # Already closed or broken: nothing left to release.
            with contextlib.suppress(Exception):
                connection.close()

    def _open(self, target: BrokerURL, address: str) -> tuple[Any, Any]:
        params = pika.ConnectionParameters(
            host=address,
            port=target.port,
            virtual_host=target.vhost,
            credentials=pika.PlainCredentials(target.username or "guest", target.password),
            connection_attempts=1,
            socket_timeout=self.connect_timeout,
            stack_timeout=self.connect_timeout,
            blocked_connection_timeout=self.total_timeout,
            heartbeat=0,
            client_properties={"connection_name": "django-pgqueue"},
        )
        connection = pika.BlockingConnection(params)
        try:
            channel = connection.channel()
            channel.confirm_delivery()
        except Exception:
            connection.close()
            raise
        return connection, channel

    @staticmethod
    def message_headers(headers: Mapping[str, str]) -> dict[str, str]:
        """The message's headers table: the webhook headers, names lower-cased (AMQP
        header names are case-sensitive; consumers look up ``webhook-id``)."""
        return {name.lower(): str(value) for name, value in headers.items()}

    def publish(
        self, target: BrokerURL, address: str, body: bytes, headers: Mapping[str, str]
    ) -> str:
        key = (address, target.port, target.vhost, target.username, target.password)
        reused = key in self._channels
        # pika's blocking publish waits for the confirm without a limit of its own: the
        # HTTP transport's watchdog cuts the socket at the total deadline instead.
        deadline = _Deadline(self.total_timeout)
        _watchdog.watch(deadline)
        try:
            try:
                self._send(key, target, address, body, headers, deadline)
            except (
                errors.StreamLostError,
                errors.ConnectionWrongStateError,
                errors.ChannelWrongStateError,
                errors.ConnectionClosed,
            ):
                if not reused or deadline.fired:
                    raise
                # A kept connection the broker closed while it was idle: once more, fresh.
                self._drop(key)
                self._send(key, target, address, body, headers, deadline)
        except Exception as exc:
            self._drop(key)
            if deadline.fired:
                raise BrokerError(f"total deadline of {self.total_timeout:g} s exceeded") from None
            raise BrokerError(_describe(exc, target, self)) from None
        finally:
            deadline.finish()
            _watchdog.unwatch(deadline)
        return f"confirmed by the broker (exchange {target.exchange!r})"

    def _send(
        self,
        key: _Key,
        target: BrokerURL,
        address: str,
        body: bytes,
        headers: Mapping[str, str],
        deadline: _Deadline,
    ) -> None:
        if key not in self._channels:
            self._channels[key] = self._open(target, address)
        connection, channel = self._channels[key]
        deadline.attach(_Socket(connection))  # type: ignore[arg-type]  # it reads .sock only
        lowered = self.message_headers(headers)
        properties = pika.BasicProperties(
            content_type=lowered.get("content-type", "application/json"),
            delivery_mode=pika.DeliveryMode.Persistent,
            message_id=lowered.get("webhook-id"),
            timestamp=int(lowered.get("webhook-timestamp", "0") or 0) or None,
            headers=lowered,
        )
        channel.basic_publish(
            exchange=target.exchange,
            routing_key=target.routing_key,
            body=body,
            properties=properties,
            mandatory=True,
        )


def _describe(exc: BaseException, target: BrokerURL, client: AmqpClient) -> str:
    """One line for the attempt log; pika's texts name no credentials, but the caller
    scrubs the password anyway."""
    if isinstance(exc, errors.UnroutableError):
        return (
            f"unroutable: exchange {target.exchange!r} routed the message to no queue "
            f"(routing key {target.routing_key!r})"
        )
    if isinstance(exc, errors.NackError):
        return "nacked: the broker refused the message (publisher confirm negative)"
    if isinstance(exc, errors.ChannelClosedByBroker):
        return f"channel closed by the broker: {exc.reply_code} {exc.reply_text}"
    if isinstance(exc, errors.ProbableAuthenticationError | errors.AuthenticationError):
        return "login refused by the broker (user name or password)"
    if isinstance(exc, errors.ProbableAccessDeniedError):
        return f"access to virtual host {target.vhost!r} refused by the broker"
    if isinstance(exc, errors.ConnectionBlockedTimeout):
        return f"the broker blocked the connection for over {client.total_timeout:g} s"
    if "Timeout" in type(exc).__name__ or isinstance(exc, TimeoutError):
        # pika's AMQPConnectorStackTimeout and socket timeouts while connecting.
        return f"connect timeout ({client.connect_timeout:g} s)"
    if isinstance(exc, errors.AMQPConnectionError):
        text = str(exc) or type(exc).__name__
        if "refused" in text.lower() or "ConnectionRefusedError" in repr(exc):
            return "connection refused"
        return f"connection error: {type(exc).__name__}: {text}"
    return f"AMQP error: {type(exc).__name__}: {exc}"
