"""Where an endpoint delivers: an HTTP(S) receiver or a broker, checked by one door.

An endpoint's URL names either a receiver (``ssrf.validate_url``'s rules) or a
broker destination (``amqp://``, ``nats://``: ``brokers/urls.py``, which reuses
the SSRF guard's host and port checks). This module picks the rule by scheme, so
neither module imports the other back, and every caller (the model's ``clean``,
the admin's explanation of a refusal) checks a URL the same way.
"""

from __future__ import annotations

from ..conf import get_settings
from .brokers import urls as broker_urls
from .ssrf import UnsafeURLError, validate_url


def validate_url_with_settings(url: str) -> None:
    """Check an endpoint's URL under ``PGQUEUE["WEBHOOKS"]`` (``ALLOW_HTTP``,
    ``ALLOW_NETWORKS``, ``ALLOWED_PORTS``, ``ALLOW_HOSTS``): the check an endpoint's
    URL passes when it is saved, and the one the admin repeats to explain a refusal.
    Raises :class:`~django_pgqueue.webhooks.ssrf.UnsafeURLError`."""
    conf = get_settings().WEBHOOKS
    if broker_urls.is_broker_url(url):
        broker_urls.validate(
            url,
            allow_networks=conf["ALLOW_NETWORKS"],
            allowed_ports=conf["ALLOWED_PORTS"],
            allow_hosts=conf["ALLOW_HOSTS"],
        )
        return
    validate_url(
        url,
        allow_http=conf["ALLOW_HTTP"],
        allow_networks=conf["ALLOW_NETWORKS"],
        allowed_ports=conf["ALLOWED_PORTS"],
        allow_hosts=conf["ALLOW_HOSTS"],
    )


def refusal_detail_now(url: str) -> str:
    """Why ``url`` is refused under today's DNS and settings, for an operator (the
    admin's attempt log: the stored refusal is the customer's text), or a line saying
    it is allowed now."""
    try:
        validate_url_with_settings(url)
    except UnsafeURLError as exc:
        return exc.operator_detail
    return "The URL is allowed under the current settings."
