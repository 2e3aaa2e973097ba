"""Outgoing webhooks: Standard Webhooks signing, SSRF guard and HTTP transport.

Kept import-light on purpose (no models, no Django settings) so receivers and the worker
can import ``verify`` and ``sign`` without an app registry.
"""

from django_pgqueue.webhooks.signing import WebhookVerificationError, sign, verify

__all__ = ["WebhookVerificationError", "sign", "verify"]
