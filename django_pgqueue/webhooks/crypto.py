"""Encryption at rest of endpoint signing secrets (Fernet, with key rotation).

Keys come from ``PGQUEUE["WEBHOOKS"]["ENCRYPTION_KEYS"]``: the first key encrypts, every
key decrypts, so a new key is added at the front and the old ones stay until
:func:`django_pgqueue.operations.reencrypt_secrets` (``manage.py
pgqueue_rotate_secrets_key``) has re-encrypted every stored secret with the new one.

When the setting is ``None`` a key is derived from ``settings.SECRET_KEY`` with HKDF
(and decrypt-only keys from ``SECRET_KEY_FALLBACKS``, so rotating Django's secret key
the documented way keeps stored secrets readable until they are re-encrypted).

Error messages never contain a secret, plaintext or encrypted.
"""

from __future__ import annotations

import base64
from datetime import datetime
from functools import lru_cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

from ..conf import get_settings
from ..exceptions import PgQueueError

#: HKDF context of the key derived from SECRET_KEY; changing it would orphan every
#: stored secret.
_HKDF_SALT = b"django-pgqueue"
_HKDF_INFO = b"webhook-endpoint-secrets"


class SecretDecryptionError(PgQueueError):
    """A stored secret cannot be decrypted with the configured keys."""


@lru_cache(maxsize=8)
def derive_key(secret_key: str) -> bytes:
    """A Fernet key derived from a Django ``SECRET_KEY`` (HKDF-SHA256).

    Cached: a pure function of the setting, and it ran on every decryption.
    """
    raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=_HKDF_SALT, info=_HKDF_INFO).derive(
        secret_key.encode()
    )
    return base64.urlsafe_b64encode(raw)


@lru_cache(maxsize=4)
def _multifernet(keys: tuple[str, ...]) -> MultiFernet:
    fernets = []
    for i, key in enumerate(keys):
        try:
            fernets.append(Fernet(key))
        except (ValueError, TypeError):
            raise SecretDecryptionError(
                f"PGQUEUE['WEBHOOKS']['ENCRYPTION_KEYS'][{i}] is not a Fernet key "
                "(32 url-safe base64-encoded bytes; make one with "
                "cryptography.fernet.Fernet.generate_key())"
            ) from None
    return MultiFernet(fernets)


def configured_keys() -> tuple[str, ...]:
    """The encryption keys in use, the encrypting one first."""
    keys = get_settings().WEBHOOKS["ENCRYPTION_KEYS"]
    if keys is not None:
        return tuple(keys)
    derived = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return tuple(derive_key(k).decode() for k in derived if k)


def encrypt_secret(plaintext: str) -> str:
    """Encrypt a signing secret with the first configured key."""
    return _multifernet(configured_keys()).encrypt(plaintext.encode()).decode("ascii")


def decrypt_secret(token: str, *, what: str = "a webhook signing secret") -> str:
    """Decrypt a stored secret; raise :class:`SecretDecryptionError` if no key fits."""
    try:
        return _multifernet(configured_keys()).decrypt(token.encode("ascii")).decode()
    except (InvalidToken, UnicodeError):
        raise SecretDecryptionError(
            f"Cannot decrypt {what}: none of the keys in "
            "PGQUEUE['WEBHOOKS']['ENCRYPTION_KEYS'] (or derived from SECRET_KEY) is the one it "
            "was encrypted with. Add the old key back (after the new one) and run "
            "'manage.py pgqueue_rotate_secrets_key'."
        ) from None


def unexpired_previous(previous: Any, now: datetime, *, what: str) -> list[dict[str, str]]:
    """The entries of an endpoint's ``previous_secrets`` still signing at ``now``.

    The one reading of that column, for the worker's signing, a rotation and the
    admin. It is read back from the database, where SQL may have written anything:
    ``ValueError`` naming ``what`` (never a secret) unless it is a list of
    ``{"secret": <ciphertext>, "expires_at": <ISO time with its offset>}``.
    """
    if not isinstance(previous, list):
        raise ValueError(f"{what}: previous secrets must be a list, not {type(previous).__name__}")
    kept: list[dict[str, str]] = []
    for n, entry in enumerate(previous):
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("secret"), str)
            and isinstance(entry.get("expires_at"), str)
        ):
            raise ValueError(
                f"{what}: previous secrets entry {n} is not an object with a text 'secret' "
                f"and 'expires_at'"
            )
        try:
            expires = datetime.fromisoformat(entry["expires_at"])
        except ValueError:
            expires = None
        if expires is None or expires.tzinfo is None:
            raise ValueError(
                f"{what}: previous secrets entry {n} has an expires_at that is not an ISO "
                f"time with its offset"
            )
        if expires > now:
            kept.append(entry)
    return kept


def decrypt_active_secrets(
    current: str,
    previous: Any,
    now: datetime,
    *,
    what: str,
    cache: dict[str, str] | None = None,
) -> list[str]:
    """The secrets to sign with: ``current`` first, then the unexpired ``previous`` ones.

    ``previous`` is the endpoint's ``previous_secrets`` (:func:`unexpired_previous`).
    ``cache`` (ciphertext to plaintext) saves decrypting the same secret again; the
    worker keeps one per claimed batch, so it lives as long as that batch.
    """

    def decrypt(token: str) -> str:
        if cache is None:
            return decrypt_secret(token, what=what)
        plaintext = cache.get(token)
        if plaintext is None:
            plaintext = cache[token] = decrypt_secret(token, what=what)
        return plaintext

    found = [decrypt(current)]
    found.extend(decrypt(entry["secret"]) for entry in unexpired_previous(previous, now, what=what))
    return found


def rotate_token(token: str) -> str:
    """Re-encrypt a stored secret with the first key (``MultiFernet.rotate``)."""
    try:
        return _multifernet(configured_keys()).rotate(token.encode("ascii")).decode("ascii")
    except InvalidToken:
        raise SecretDecryptionError(
            "Cannot re-encrypt a webhook signing secret: no configured key decrypts it."
        ) from None
