"""A secret shown once after the POST that made it (POST/redirect/GET).

The POST keeps the secret sealed (the vault's key) in the session under ``slot`` with what
it belongs to, and redirects; the page's next GET takes it out and shows it. A reload then
neither posts again (a second key, a second secret) nor shows the secret again.
"""

from __future__ import annotations

from typing import Any

from apps.accounts import crypto

__all__ = ["secret_hold", "secret_take"]


def secret_hold(request, *, slot: str, secret: str, owner: Any = None) -> None:
    """Keep ``secret`` sealed in ``request``'s session under ``slot`` for ``owner`` (an
    id, or None) until :func:`secret_take` takes it."""
    request.session[slot] = {"owner": owner, "sealed": crypto.seal(secret)}


def secret_take(request, *, slot: str, owner: Any = None) -> str:
    """The secret held under ``slot`` for ``owner``, taken out of the session ("" when
    none); one held for another owner stays for its own page."""
    held = request.session.get(slot)
    if not held or held.get("owner") != owner:
        return ""
    del request.session[slot]
    return crypto.unseal(held["sealed"])
