"""Helpers of the notifications tests: a subscription made through the service, and the
receiver's check of a signature exactly as docs/notifications.md shows it."""

from __future__ import annotations

import re
from pathlib import Path

from apps.notifications.models import SUBSCRIBABLE, Subscription
from apps.notifications.services import SubscriptionFields, subscription_create

DOCS = Path(__file__).resolve().parents[2] / "docs" / "notifications.md"


def subscribed(by, url: str, *, team: bool = False, events=SUBSCRIBABLE, name="Ours", **kw):
    """(subscription, its secret) for ``url``, made by ``by`` as the page makes it."""
    fields = SubscriptionFields(name=name, url=url, events=[str(e) for e in events], **kw)
    return subscription_create(by=by, fields=fields, team=team)


def docs_verify():
    """The ``verify(secret, headers, body)`` of the manual's "Verify a signature", run as
    a receiver would copy it."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## Verify a signature", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, str(DOCS), "exec"), namespace)  # noqa: S102 - the manual's own code
    return namespace["verify"]


__all__ = ["Subscription", "docs_verify", "subscribed"]
