"""Publishing one delivery to a broker: the SSRF check, the client, the result."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..crypto import SecretDecryptionError
from ..ssrf import UnsafeURLError
from ..transport_result import TransportResult
from . import urls
from .errors import BrokerError
from .urls import BrokerURL

__all__ = ["BrokerError", "BrokerPublisher", "BrokerResult"]


class _Client(Protocol):
    def publish(
        self, target: BrokerURL, address: str, body: bytes, headers: Mapping[str, str]
    ) -> str: ...

    def close(self) -> None: ...

    def message_headers(self, headers: Mapping[str, str]) -> dict[str, str]: ...


@dataclass
class BrokerResult(TransportResult):
    """A publish's result: delivered when the broker confirmed it, there is no HTTP status.

    ``body`` holds what the broker said (the JetStream ack, the confirm), shown in the
    attempt log as the response.
    """

    confirmed: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and self.confirmed


class _Policy(Protocol):
    """What a publisher reads of the ``WebhookTransport`` that owns it (which imports
    this module, so it is described here rather than imported)."""

    connect_timeout: float
    total_timeout: float
    allow_networks: Any
    allowed_ports: Any
    resolver: Any
    deny_addresses: Any
    allow_hosts: Any


class BrokerPublisher:
    """Publishes deliveries to brokers with the SSRF policy and budgets of a transport."""

    def __init__(self, transport: _Policy) -> None:
        self.transport = transport
        self._clients: dict[str, _Client] = {}

    def _client(self, scheme: str) -> _Client:
        client = self._clients.get(scheme)
        if client is None:
            if scheme == "amqp":
                from .amqp import AmqpClient

                client = AmqpClient(self.transport.connect_timeout, self.transport.total_timeout)
            else:
                from .nats import NatsClient

                client = NatsClient(self.transport.connect_timeout, self.transport.total_timeout)
            self._clients[scheme] = client
        return client

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def publish(self, url: str, body: bytes, headers: Mapping[str, str]) -> BrokerResult:
        """Publish ``body`` to the broker ``url`` names; never raises for broker trouble."""
        started = time.monotonic()
        transport = self.transport
        try:
            target = urls.parse(url)
            target = replace(
                target, password=urls.open_password(target.password, what="a broker password")
            )
            addresses = urls.validate(
                url,
                allow_networks=transport.allow_networks,
                allowed_ports=transport.allowed_ports,
                resolver=transport.resolver,
                deny_addresses=transport.deny_addresses,
                allow_hosts=transport.allow_hosts,
            )
        except (UnsafeURLError, SecretDecryptionError) as exc:
            return BrokerResult(error=f"refused: {exc}")
        # Connect to the address that was checked, never to the name again (rebinding).
        address = str(addresses[0])
        client: _Client | None = None
        try:
            client = self._client(target.scheme)
            ack = client.publish(target, address, body, headers)
            result = BrokerResult(confirmed=True, body=ack.encode())
        except BrokerError as exc:
            result = BrokerResult(error=_scrub(str(exc), target))
        except Exception as exc:  # the contract is "never raises" for broker trouble
            result = BrokerResult(
                error=_scrub(f"unexpected error: {type(exc).__name__}: {exc}", target)
            )
        result.address = address
        if client is not None:
            result.request_headers = client.message_headers(headers)
        result.duration_ms = int((time.monotonic() - started) * 1000)
        return result


def _scrub(text: str, target: BrokerURL) -> str:
    """``text`` without the password, whatever a client library put in its message."""
    if target.password:
        text = text.replace(target.password, "***")
    return text[:500]
