"""Broker destinations: an endpoint whose URL is ``amqp://`` or ``nats://``.

The delivery is the same row, signed the same way, with the same retries, breaker,
attempt log and replay as an HTTP one; only the last step differs. Instead of a POST,
the body (exactly the bytes that would be POSTed, so the signature verifies) is
published with the Standard Webhooks headers as message headers, and the attempt
succeeds only when the broker confirmed it: a RabbitMQ publisher confirm, a JetStream
publish ack. The message id is the delivery's ``webhook-id``, stable across retries
and replays, so consumers (and JetStream's ``Nats-Msg-Id`` window) de-duplicate.

:class:`BrokerPublisher` answers a :class:`~django_pgqueue.webhooks.transport.TransportResult`
like the HTTP transport and never raises for broker trouble. Like the transport, one
publisher per worker thread: it keeps its broker connections open between deliveries.
"""

from .urls import BROKER_SCHEMES, is_broker_url, masked

__all__ = ["BROKER_SCHEMES", "is_broker_url", "masked"]
