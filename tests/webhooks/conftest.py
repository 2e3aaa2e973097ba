"""Fixtures of the webhook engine tests: real receivers on 127.0.0.1, fast retry
settings and endpoint factories."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ..support.receiver import Receiver

#: Fast, deterministic delivery settings: retries due at once, a short breaker.
FAST_WEBHOOKS: dict[str, Any] = {
    "ALLOW_NETWORKS": ["127.0.0.0/8"],
    "ALLOW_HTTP": True,
    "RETRY_SCHEDULE": [0, 0, 0],
    "RETRY_JITTER": 0,
    "CONNECT_TIMEOUT": 2.0,
    "TOTAL_TIMEOUT": 5.0,
    "BREAKER_THRESHOLD": 100,
}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as server:
        yield server


@pytest.fixture
def webhooks_conf(settings: Any) -> Callable[..., None]:
    """Set ``PGQUEUE["WEBHOOKS"]`` to FAST_WEBHOOKS plus the given keys."""

    def configure(**overrides: Any) -> None:
        settings.PGQUEUE = {
            **settings.PGQUEUE,
            "POLL_INTERVAL": 0.05,
            "WEBHOOKS": {**FAST_WEBHOOKS, **overrides},
        }

    configure()
    return configure


@pytest.fixture
def make_endpoint(webhooks_conf: Any) -> Callable[..., Any]:
    """Create a validated Endpoint: ``make_endpoint(url, event_types=[...])``."""
    from django_pgqueue.models import Endpoint

    def make(url: str, **fields: Any) -> Any:
        endpoint = Endpoint(url=url, **fields)
        endpoint.full_clean()
        endpoint.save()
        return endpoint

    return make
