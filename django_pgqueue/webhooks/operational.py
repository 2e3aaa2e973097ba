"""Operational webhooks: the project is told when an endpoint is disabled, when a
circuit breaker opens and when a delivery goes dead.

Those transitions happen in one place, ``sql.COMPLETE_DELIVERIES`` (written by the
webhook worker's ``write_outcomes``), which returns what it changed. After that
statement has committed, ``announce`` sends one Django signal per change:

* ``endpoint_disabled(sender=Endpoint, endpoint=...)``: 410 Gone, or no success for
  ``DISABLE_AFTER`` (``endpoint.disabled_reason`` says which);
* ``breaker_opened(sender=Endpoint, endpoint=...)``: failures reached
  ``BREAKER_THRESHOLD``, or a half-open probe failed (``endpoint.open_until``);
* ``delivery_dead(sender=Delivery, delivery=...)``: the last attempt failed.

With ``PGQUEUE["WEBHOOKS"]["OPERATIONAL_APPLICATION"]`` set to the uid of an
application of the project's own, each change is also sent as an event
(``pgqueue.endpoint.disabled``, ``pgqueue.endpoint.breaker_opened``,
``pgqueue.delivery.dead``) to that application's endpoints, signed and retried like
every other. Changes of that application's own endpoints are not sent there (a
failing operational endpoint would otherwise feed itself).

Receivers run in the worker after the write, with ``send_robust``: one that raises is
logged and never undoes or delays the completion.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.db import connections, transaction
from django.dispatch import Signal

from ..conf import get_settings

logger = logging.getLogger("django_pgqueue.webhooks")

endpoint_disabled = Signal()
breaker_opened = Signal()
delivery_dead = Signal()

#: Event types of the operational events.
ENDPOINT_DISABLED = "pgqueue.endpoint.disabled"
BREAKER_OPENED = "pgqueue.endpoint.breaker_opened"
DELIVERY_DEAD = "pgqueue.delivery.dead"


def announce(*, opened: Iterable[int], disabled: Iterable[int], dead: Iterable[int]) -> None:
    """Send the signals (and operational events) for what one completion changed."""
    opened, disabled, dead = set(opened), set(disabled), sorted(set(dead))
    if not (opened or disabled or dead):
        return
    alias = get_settings().DATABASE
    try:
        _announce(alias, opened, disabled, dead)
    finally:
        # The worker's threads reach Django's connection only here: close it rather
        # than leave one open per thread between these rare transitions.
        if not connections[alias].in_atomic_block:
            connections[alias].close()


def _announce(alias: str, opened: set[int], disabled: set[int], dead: list[int]) -> None:
    from ..models import Delivery, Endpoint

    endpoints = Endpoint.objects.using(alias).select_related("application")
    for endpoint in endpoints.filter(pk__in=sorted(disabled)):
        _send(endpoint_disabled, Endpoint, endpoint=endpoint)
    for endpoint in endpoints.filter(pk__in=sorted(opened)):
        _send(breaker_opened, Endpoint, endpoint=endpoint)
    deliveries = Delivery.objects.using(alias).select_related(
        "event", "endpoint", "endpoint__application"
    )
    for delivery in deliveries.filter(pk__in=dead):
        _send(delivery_dead, Delivery, delivery=delivery)


def _send(signal: Signal, sender: type, **kwargs: Any) -> None:
    for receiver, result in signal.send_robust(sender=sender, **kwargs):
        if isinstance(result, Exception):
            logger.error(
                "An operational signal receiver (%r) raised: %r", receiver, result, exc_info=result
            )


def endpoint_payload(endpoint: Any) -> dict[str, Any]:
    application = endpoint.application
    return {
        "endpoint_id": endpoint.pk,
        "url": endpoint.display_url,
        "application": application.uid if application else None,
        "is_active": endpoint.is_active,
        "disabled_reason": endpoint.disabled_reason,
        "breaker_state": endpoint.breaker_state,
        "open_until": endpoint.open_until.isoformat() if endpoint.open_until else None,
        "consecutive_failures": endpoint.consecutive_failures,
    }


def _operational_event(event_type: str, endpoint: Any, payload: dict[str, Any]) -> None:
    from .fanout import send_event

    uid = get_settings().WEBHOOKS["OPERATIONAL_APPLICATION"]
    if uid is None or (endpoint.application and endpoint.application.uid == uid):
        return
    with transaction.atomic(using=get_settings().DATABASE):
        send_event(event_type, payload, application=uid)


def _on_disabled(sender: Any, endpoint: Any, **kwargs: Any) -> None:
    _operational_event(ENDPOINT_DISABLED, endpoint, endpoint_payload(endpoint))


def _on_opened(sender: Any, endpoint: Any, **kwargs: Any) -> None:
    _operational_event(BREAKER_OPENED, endpoint, endpoint_payload(endpoint))


def _on_dead(sender: Any, delivery: Any, **kwargs: Any) -> None:
    _operational_event(
        DELIVERY_DEAD,
        delivery.endpoint,
        {
            "delivery_id": delivery.pk,
            "attempts": delivery.attempts,
            "last_error": delivery.last_error,
            "event_type": delivery.event.event_type,
            "msg_id": delivery.event.msg_id,
            **endpoint_payload(delivery.endpoint),
        },
    )


endpoint_disabled.connect(_on_disabled, dispatch_uid="pgqueue-operational-disabled")
breaker_opened.connect(_on_opened, dispatch_uid="pgqueue-operational-opened")
delivery_dead.connect(_on_dead, dispatch_uid="pgqueue-operational-dead")
