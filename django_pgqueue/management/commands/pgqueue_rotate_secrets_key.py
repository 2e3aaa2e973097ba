"""``manage.py pgqueue_rotate_secrets_key``: re-encrypt stored webhook secrets with the
first key of ``PGQUEUE["WEBHOOKS"]["ENCRYPTION_KEYS"]``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_pgqueue.operations import reencrypt_secrets
from django_pgqueue.webhooks.crypto import SecretDecryptionError


class Command(BaseCommand):
    help = (
        "Re-encrypt every webhook endpoint secret with the first encryption key, so older "
        "keys can be removed from PGQUEUE['WEBHOOKS']['ENCRYPTION_KEYS'] afterwards."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--database", default=None, help="Database alias (default: PGQUEUE's).")

    def handle(self, *args: Any, database: str | None = None, **options: Any) -> None:
        try:
            count = reencrypt_secrets(using=database)
        except SecretDecryptionError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Re-encrypted the secrets of {count} endpoint(s).")
