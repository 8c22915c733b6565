"""What a request to the JSON API was allowed by, when a studio key (not a browser
session) signed it: the foundation every app's API reads, so that an app checks a key's
scope without importing the agents app that owns keys."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KeyGrant:
    """``request.auth`` of a request signed with a studio key: its non-secret id and
    whether it may start work (``ApiKey.Scope.START``) or only read."""

    key_id: str
    may_start: bool


def may_start(auth: object) -> bool:
    """True when a request authenticated as ``auth`` may start work: a browser session
    (``auth`` is ``None``; the person's own rights then decide) or a key that may start."""
    return not isinstance(auth, KeyGrant) or auth.may_start
