"""Fernet encryption for the token vault, keyed by ``settings.TAU2_VAULT_KEYS``.

The first key encrypts; every key decrypts, so a new key goes first and the old ones stay
until ``manage.py rotate_vault_keys`` has re-encrypted every row.
"""

from __future__ import annotations

from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

__all__ = ["InvalidToken", "rotate", "seal", "sealed_fields", "sealed_fields_register", "unseal"]


@lru_cache(maxsize=4)
def _multi(keys: tuple[str, ...]) -> MultiFernet:
    if not keys:
        raise ImproperlyConfigured("TAU2_VAULT_KEYS is empty: the token vault has no key.")
    try:
        return MultiFernet([Fernet(key.encode()) for key in keys])
    except ValueError:
        # Not the key itself in the message: it is a secret.
        raise ImproperlyConfigured(
            "TAU2_VAULT_KEYS holds a value that is not a Fernet key "
            "(32 url-safe base64-encoded bytes)."
        ) from None


def _fernet() -> MultiFernet:
    # Read at call time so that override_settings and key rotation take effect.
    return _multi(tuple(settings.TAU2_VAULT_KEYS))


def seal(plaintext: str) -> str:
    """The ciphertext (ASCII) of ``plaintext`` under the first vault key."""
    return _fernet().encrypt(plaintext.encode()).decode("ascii")


def unseal(ciphertext: str) -> str:
    """The plaintext; raises ``InvalidToken`` when no vault key opens it."""
    return _fernet().decrypt(ciphertext.encode("ascii")).decode()


def rotate(ciphertext: str) -> str:
    """The same plaintext re-encrypted under the first key (raises ``InvalidToken``)."""
    return _fernet().rotate(ciphertext.encode("ascii")).decode("ascii")


# Every model field sealed with this vault, by model label ("app_label.Model"): what
# ``manage.py rotate_vault_keys`` re-encrypts. The accounts app registers its own; apps
# above it register theirs in their ``AppConfig.ready`` (accounts imports none of them).
_sealed: dict[str, tuple[str, ...]] = {}


def sealed_fields_register(model: str, *fields: str) -> None:
    """Say that ``model``'s ``fields`` hold ciphertext of this vault (or are empty)."""
    _sealed[model] = tuple(fields)


def sealed_fields() -> dict[str, tuple[str, ...]]:
    """Each registered model label with its sealed fields."""
    return dict(_sealed)
