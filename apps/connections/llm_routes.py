"""Which model a run's side names, whether its starter may use it, and the route to it.

A side of a run (the agent, the customer) names its model in one of two ways, the same
in every picker, form and API:

* ``org/model[:provider|:fastest|:cheapest]`` — Hugging Face's router, on the person's
  own Hugging Face token (``apps.inference`` checks it against the catalogue);
* ``@<slug>/<model>`` — a model of the connection ``slug`` (``apps.connections``), on
  that connection's key, if the person may use it.

:func:`route_resolve` checks a picked value for a person (forms, APIs); :func:`route_for`
builds the ``tau2_env.llm.gateway.Route`` a worker calls along — the only place a connection's
key is opened.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db.models import Q

from apps.accounts import crypto
from apps.accounts.vault import ANONYMOUS, SignInRequired, hf_credential_check, hf_token_for
from apps.connections.models import Connection, ConnectionModel
from apps.inference.pricing import PricePair, price_label
from apps.inference.selectors import resolve_agent_model
from tau2_env import config
from tau2_env.llm import gateway

__all__ = [
    "ConnectionUnavailable",
    "ResolvedRoute",
    "can_use",
    "connection_value",
    "first_connection_value",
    "parse_value",
    "prices_of",
    "side_provenance",
    "route_for",
    "route_resolve",
    "router_refusal",
    "usable_connections",
]

# litellm needs a key even for an endpoint that takes none (a local vLLM, Ollama): this
# one is sent instead, never a server-side key from the environment.
NO_KEY = "no-key"
_ROUTER_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(:[\w.-]+)?$")


class ConnectionUnavailable(Exception):
    """The connection cannot serve this run (deleted, no longer allowed, key unreadable);
    ``str()`` says so for the person, with no secret in it."""


def connection_value(*, slug: str, model: str) -> str:
    """The picker's and the APIs' name of a connection's model: ``@slug/model``."""
    return f"@{slug}/{model}"


def parse_value(value: str) -> tuple[str | None, str]:
    """``(slug, model)`` for ``@slug/model``; ``(None, value)`` for a router model."""
    text = (value or "").strip()
    if not text.startswith("@"):
        return None, text
    slug, sep, model = text[1:].partition("/")
    if not sep or not slug or not model.strip():
        raise ValueError(f"{text!r} is not a connection's model: write @connection/model.")
    return slug, model.strip()


def can_use(user, connection: Connection) -> bool:
    """True when ``user`` may run models on ``connection``: its owner for a personal one;
    for a team one, as staff chose (everyone signed in, staff, the people named)."""
    if connection.is_deleted or user is None or not getattr(user, "is_authenticated", False):
        return False
    if not user.is_active:
        return False
    if connection.owner_id is not None:
        return connection.owner_id == user.pk
    if connection.access == Connection.Access.EVERYONE:
        return True
    if user.is_staff:
        return True
    if connection.access == Connection.Access.NAMED:
        return connection.allowed_users.filter(pk=user.pk).exists()
    return False


def usable_connections(user):
    """The connections ``user`` may use (team ones allowed to them, their own), by name."""
    if user is None or not getattr(user, "is_authenticated", False):
        return Connection.objects.none()
    found = Connection.objects.filter(deleted_at__isnull=True).prefetch_related("models")
    mine = found.filter(owner_id=user.pk)
    team = found.filter(owner__isnull=True)
    if not user.is_staff:
        team = team.filter(
            Q(access=Connection.Access.EVERYONE)
            | Q(access=Connection.Access.NAMED, allowed_users=user)
        )
    return (mine | team).distinct().order_by("owner_id", "name")


def first_connection_value(user) -> str:
    """``@slug/model`` of the first model on a connection ``user`` may use (their own
    connections first), or "" when they may use none."""
    for connection in usable_connections(user):
        model = next(iter(connection.models.all()), None)
        if model is not None:
            return connection_value(slug=connection.slug, model=model.name)
    return ""


def router_refusal(*, user) -> str | None:
    """Why ``user`` cannot run a model on Hugging Face's router (the vault's words for
    them), or ``None`` when their sign-in stands. A light check for pages and pickers: it
    neither opens nor refreshes the token (a start asks the vault itself)."""
    if user is None or not getattr(user, "is_authenticated", False):
        return ANONYMOUS
    try:
        hf_credential_check(user_id=user.pk)
    except SignInRequired as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class ResolvedRoute:
    """What a picked model means for a run's side.

    ``connection`` is ``None`` for Hugging Face's router; ``model`` the model as its
    provider names it (a router value keeps its ``:provider`` / ``:policy``); ``value``
    what the picker and APIs call it; ``prices`` (input, output per 1M tokens) the ones
    to charge, ``None`` when unpriced (never $0).
    """

    connection: Connection | None
    model: str
    prices: PricePair | None

    @property
    def value(self) -> str:
        if self.connection is None:
            return self.model
        return connection_value(slug=self.connection.slug, model=self.model)

    @property
    def where(self) -> str:
        """Where it runs, for people: ``Hugging Face Inference Providers`` or the connection."""
        if self.connection is None:
            return "Hugging Face Inference Providers"
        return self.connection.where_label

    @property
    def price_label(self) -> str:
        return "unpriced" if self.prices is None else price_label(*self.prices)

    def provenance(self) -> dict:
        """Where a side ran, for a run's provenance and exports: never the key."""
        return side_provenance(connection=self.connection, model=self.model)


def side_provenance(*, connection: Connection | None, model: str) -> dict:
    """Where a side of a run runs, for its provenance and exports (never a key): the
    model, the provider and, for a connection, which one and its endpoint."""
    if connection is None:
        return {"model": model, "provider": "hf-inference-providers"}
    return {
        "model": model,
        "provider": connection.kind,
        "connection": {
            "id": connection.pk,
            "slug": connection.slug,
            "name": connection.name,
            "kind": connection.kind,
            "base_url": connection_base_url(connection),
        },
        "litellm_model": gateway.Route(
            provider=connection.kind, model=model, base_url=None, api_key=NO_KEY
        ).litellm_model,
    }


def route_resolve(value: str, *, user, role: str = "agent") -> ResolvedRoute:
    """Check a picked model for ``user``; raises ``ValueError`` with a message for them.

    A router model must be in the catalogue (``apps.inference``); a connection's model
    must be one the connection offers, on a connection ``user`` may use.
    """
    slug, model = parse_value(value)
    if slug is None:
        if not model:
            raise ValueError(f"Choose the {role} model.")
        try:
            resolved = resolve_agent_model(model)
        except ValueError:
            # The customer may be any router model id, as before it was a picker: the
            # router says whether it serves it; it is unpriced until the catalogue knows it.
            if role == "agent" or not _ROUTER_ID.match(model):
                raise
            return ResolvedRoute(connection=None, model=model, prices=None)
        return ResolvedRoute(connection=None, model=resolved.value, prices=resolved.prices)
    connection = Connection.objects.filter(slug=slug, deleted_at__isnull=True).first()
    if connection is None or not can_use(user, connection):
        raise ValueError(
            f"There is no connection @{slug} you may use: pick a model from the list, or "
            "ask staff for access."
        )
    offered = ConnectionModel.objects.filter(connection=connection, name=model).first()
    if offered is None:
        names = list(connection.models.values_list("name", flat=True)[:8])
        raise ValueError(
            f"{connection.name} offers no model {model!r}"
            + (f"; it offers {', '.join(names)}." if names else "; staff have listed none yet.")
        )
    return ResolvedRoute(connection=connection, model=model, prices=offered.prices)


def connection_base_url(connection: Connection) -> str:
    """The connection's endpoint: its own, else the provider's (a setting per kind)."""
    if connection.base_url:
        return connection.base_url.rstrip("/")
    return settings.TAU2_PROVIDER_URLS.get(connection.kind, "").rstrip("/")


def route_for(*, connection: Connection | None, model: str, user) -> gateway.Route:
    """The route along which ``user``'s run calls ``model``: the router on their own
    Hugging Face token, or ``connection`` on its key. The one place a key is opened.

    Raises ``apps.accounts.vault.SignInRequired`` (router, no usable token) or
    :class:`ConnectionUnavailable` (deleted, no longer allowed, key unreadable).
    """
    if connection is None:
        return gateway.hf_route(model=model, token=hf_token_for(user=user))
    connection = Connection.objects.get(pk=connection.pk)  # as it is now, not as it was
    if connection.is_deleted:
        raise ConnectionUnavailable(
            f"The connection {connection.name!r} was deleted: run it again with another model."
        )
    if not can_use(user, connection):
        raise ConnectionUnavailable(
            f"You may no longer use the connection {connection.name!r}: ask staff for access, "
            "or pick another model."
        )
    try:
        key = crypto.unseal(connection.api_key_enc) if connection.api_key_enc else NO_KEY
        headers = (
            json.loads(crypto.unseal(connection.headers_enc)) if connection.headers_enc else {}
        )
    except crypto.InvalidToken:
        raise ConnectionUnavailable(
            f"The key of the connection {connection.name!r} can no longer be read by this "
            "server: staff must enter it again (rotate it)."
        ) from None
    return gateway.Route(
        provider=connection.kind,
        model=model,
        base_url=connection_base_url(connection) or None,
        api_key=key,
        timeout=config.llm_timeout(),
        extra_headers=headers,
        label=connection.name,
        origin=connection_value(slug=connection.slug, model=model),
    )


def prices_of(*, connection: Connection | None, model: str) -> tuple[Decimal, Decimal] | None:
    """A side's prices now (per 1M tokens), or ``None`` when unpriced."""
    if connection is None:
        try:
            return resolve_agent_model(model).prices
        except ValueError:
            return None
    offered = ConnectionModel.objects.filter(connection=connection, name=model).first()
    return offered.prices if offered is not None else None
