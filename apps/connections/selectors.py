"""Reads of connections for their pages: who sees and who manages one, and what a
page shows of it (never its key: the hint only, and the names of its extra headers).

* Everyone signed in sees the team connections they may use (``routes.can_use``) and
  their own personal ones; staff see every team connection.
* Staff manage (edit, rotate, delete) team connections; a person manages their own
  personal ones. Nobody else sees a personal connection, staff included: one person's
  credential never serves another's run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils.dateparse import parse_datetime

from apps.connections.llm_routes import can_use, connection_base_url
from apps.connections.models import Connection
from apps.inference.pricing import price_label

__all__ = [
    "ConnectionCard",
    "LastTest",
    "ModelLine",
    "can_manage",
    "can_see",
    "connection_card",
    "connection_cards_for",
    "connection_visible",
    "endpoint_host",
    "people_choices",
]

# The last Test's kinds as the pages say them (apps.connections.probe writes them).
TEST_KIND_LABELS = {
    "works": "works",
    "no_tool_calling": "no tool calling",
    "refused_key": "refused key",
    "unknown_model": "unknown model",
    "rate_limited": "rate limited",
    "unreachable": "unreachable",
    "not_allowed": "address not allowed",
    "timeout": "timeout",
    "too_large": "answer too large",
    "not_json": "not JSON",
    "no_credits": "no credits",
    "provider_error": "provider error",
    "bad_request": "request refused",
    "unavailable": "unavailable",
    "error": "error",
}


def _signed_in(user) -> bool:
    return bool(user is not None and user.is_authenticated and user.is_active)


def can_manage(user, connection: Connection) -> bool:
    """True when ``user`` may edit, rotate the key of, delete (or read the models of)
    ``connection``: staff for a team one, its owner for a personal one."""
    if not _signed_in(user) or connection.is_deleted:
        return False
    if connection.owner_id is not None:
        return connection.owner_id == user.pk
    return bool(user.is_staff)


def can_see(user, connection: Connection) -> bool:
    """True when ``user`` may see ``connection``'s page: who may use or manage it."""
    return can_manage(user, connection) or can_use(user, connection)


def _visible(user):
    found = Connection.objects.filter(deleted_at__isnull=True)
    if not _signed_in(user):
        return found.none()
    team = Q(owner__isnull=True)
    if not user.is_staff:
        team &= Q(access=Connection.Access.EVERYONE) | Q(
            access=Connection.Access.NAMED, allowed_users=user
        )
    return found.filter(team | Q(owner_id=user.pk)).distinct()


def connection_visible(*, user, pk: int) -> Connection | None:
    """The connection ``pk`` if ``user`` may see it, else ``None`` (deleted ones: none)."""
    return _visible(user).filter(pk=pk).select_related("owner").first()


def people_choices():
    """Who staff may name on a team connection: active people, by username."""
    return get_user_model().objects.filter(is_active=True).order_by("username")


def endpoint_host(connection: Connection) -> str:
    """``api.openai.com`` or ``127.0.0.1:8000``: where it is, never a path or a query
    (a key may hide in one)."""
    parts = urlsplit(connection_base_url(connection))
    if not parts.hostname:
        return ""
    return f"{parts.hostname}{f':{parts.port}' if parts.port else ''}"


@dataclass(frozen=True)
class ModelLine:
    name: str
    price_label: str  # "$0.27 / $1.10 per 1M" or "unpriced"
    price_source: str  # "litellm's price list", "entered by staff", "" (unpriced)
    is_priced: bool


@dataclass(frozen=True)
class LastTest:
    """The last Test as shown: ``label`` (``works``, ``refused key``…) and the message."""

    ok: bool
    kind: str
    label: str
    message: str
    model: str
    at: datetime | None


@dataclass(frozen=True)
class ConnectionCard:
    """What a page shows of one connection for one person."""

    connection: Connection
    host: str
    who: str  # who may use it, in words
    models: tuple[ModelLine, ...]
    last_test: LastTest | None
    manageable: bool
    usable: bool

    @property
    def pk(self) -> int:
        return self.connection.pk


def _who(connection: Connection, user) -> str:
    if connection.owner_id is not None:
        return "only you" if connection.owner_id == user.pk else "only its owner"
    if connection.access == Connection.Access.NAMED:
        names = [person.username for person in connection.allowed_users.all()]
        if not names:
            return "staff only (nobody named yet)"
        return "staff and " + ", ".join(names)
    return str(connection.get_access_display())


def _last_test(connection: Connection) -> LastTest | None:
    test = connection.last_test or {}
    if not test.get("kind"):
        return None
    kind = str(test["kind"])
    return LastTest(
        ok=bool(test.get("ok")),
        kind=kind,
        label=TEST_KIND_LABELS.get(kind, kind.replace("_", " ")),
        message=str(test.get("message") or ""),
        model=str(test.get("model") or ""),
        at=parse_datetime(test["at"]) if test.get("at") else None,
    )


def connection_card(connection: Connection, *, user) -> ConnectionCard:
    """The card of ``connection`` for ``user`` (who may see it: :func:`can_see`)."""
    models = tuple(
        ModelLine(
            name=model.name,
            price_label=(
                f"{price_label(model.input_price, model.output_price)} per 1M"
                if model.prices
                else "unpriced"
            ),
            price_source=str(model.get_price_source_display()) if model.prices else "",
            is_priced=model.prices is not None,
        )
        for model in connection.models.all()
    )
    return ConnectionCard(
        connection=connection,
        host=endpoint_host(connection),
        who=_who(connection, user),
        models=models,
        last_test=_last_test(connection),
        manageable=can_manage(user, connection),
        usable=can_use(user, connection),
    )


def connection_cards_for(*, user) -> tuple[list[ConnectionCard], list[ConnectionCard]]:
    """(team, personal): the cards of every connection ``user`` may see, by name."""
    found = (
        _visible(user)
        .select_related("owner")
        .prefetch_related("models", "allowed_users")
        .order_by("name", "pk")
    )
    cards = [connection_card(connection, user=user) for connection in found]
    team = [card for card in cards if card.connection.is_team]
    personal = [card for card in cards if not card.connection.is_team]
    return team, personal
