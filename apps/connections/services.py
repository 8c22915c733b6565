"""Writes of connections: create (keys sealed in the vault), list models, prices.

A key is sealed the moment it arrives and never stored, logged or returned in the clear;
only ``apps.connections.routes.route_for`` opens it, for a run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.text import slugify

from apps.accounts import crypto
from apps.connections.models import Connection, ConnectionModel
from tau2_env.llm import LITELLM_PREFIXES, litellm

__all__ = ["connection_create", "key_hint", "litellm_prices", "models_set"]


def key_hint(key: str) -> str:
    """``…a1b2``: enough to tell two keys apart, never enough to use one."""
    key = (key or "").strip()
    return f"…{key[-4:]}" if len(key) >= 12 else ("…" if key else "")


def litellm_prices(*, kind: str, model: str) -> tuple[Decimal, Decimal] | None:
    """(input, output) USD per 1M tokens from litellm's cost map, or ``None`` when it does
    not know the model (an own endpoint's model: enter its prices, or it stays unpriced)."""
    prefix = LITELLM_PREFIXES.get(kind, "")
    if kind == "openai_compatible":
        return None  # a name on someone's own server says nothing of its price
    for name in (f"{prefix}/{model}", model):
        info = litellm.model_cost.get(name)
        if not info:
            continue
        given_in = info.get("input_cost_per_token")
        given_out = info.get("output_cost_per_token")
        if given_in is None or given_out is None:
            continue
        million = Decimal(1_000_000)
        return (Decimal(str(given_in)) * million, Decimal(str(given_out)) * million)
    return None


def _unique_slug(name: str) -> str:
    base = slugify(name)[:32] or "connection"
    slug, n = base, 2
    while Connection.objects.filter(slug=slug).exists():
        slug, n = f"{base}-{n}", n + 1
    return slug


@transaction.atomic
def connection_create(
    *,
    by,
    name: str,
    kind: str,
    api_key: str = "",
    base_url: str = "",
    headers: Mapping[str, str] | None = None,
    models: Iterable[str | tuple[str, tuple | None]] = (),
    owner=None,
    access: str = Connection.Access.EVERYONE,
    allowed_users: Iterable = (),
    slug: str = "",
    monthly_budget_usd: Decimal | None = None,
    person_monthly_budget_usd: Decimal | None = None,
    max_in_flight: int | None = None,
) -> Connection:
    """A new connection by ``by``: a team one (``owner`` None, staff only) or ``owner``'s own.

    ``models``: names (priced from litellm's cost map when it knows them) or
    ``(name, (input, output))`` pairs with entered prices (``None``: unpriced).
    Raises ``ValidationError`` for what no connection may have.
    """
    if kind not in Connection.Kind.values:
        raise ValidationError({"kind": f"Unknown kind {kind!r}."})
    if kind == Connection.Kind.OPENAI_COMPATIBLE and not base_url:
        raise ValidationError({"base_url": "An OpenAI-compatible endpoint needs its base URL."})
    if owner is None and not getattr(by, "is_staff", False):
        raise ValidationError("Only staff add team connections; add a personal one instead.")
    api_key = (api_key or "").strip()
    headers = {str(k): str(v) for k, v in (headers or {}).items()}
    connection = Connection.objects.create(
        name=name.strip()[:80],
        slug=slug or _unique_slug(name),
        kind=kind,
        base_url=(base_url or "").strip(),
        api_key_enc=crypto.seal(api_key) if api_key else "",
        key_hint=key_hint(api_key),
        headers_enc=crypto.seal(json.dumps(headers)) if headers else "",
        header_names=sorted(headers),
        owner=owner,
        access=access,
        created_by=by,
        monthly_budget_usd=monthly_budget_usd,
        person_monthly_budget_usd=person_monthly_budget_usd,
        max_in_flight=max_in_flight,
    )
    if allowed_users:
        connection.allowed_users.set(list(allowed_users))
    models_set(connection=connection, models=models)
    return connection


def models_set(
    *, connection: Connection, models: Iterable[str | tuple[str, tuple | None]]
) -> list[ConnectionModel]:
    """Add (or re-price) the connection's ``models``; the others stay as they are."""
    out = []
    for item in models:
        name, entered = (item, None) if isinstance(item, str) else item
        name = name.strip()
        if not name:
            continue
        if entered is not None and entered[0] is not None and entered[1] is not None:
            prices, source = entered, ConnectionModel.PriceSource.ENTERED
        else:
            prices = litellm_prices(kind=connection.kind, model=name)
            source = ConnectionModel.PriceSource.LITELLM if prices else ""
        row, _ = ConnectionModel.objects.update_or_create(
            connection=connection,
            name=name,
            defaults={
                "input_price": prices[0] if prices else None,
                "output_price": prices[1] if prices else None,
                "price_source": source,
            },
        )
        out.append(row)
    return out
