"""The error a broker client raises for a failed publish (its own module: the
publisher imports the clients, and the clients raise this)."""

from __future__ import annotations


class BrokerError(Exception):
    """A failed publish, with a message fit for the attempt log (no credentials)."""
