"""The Hugging Face router's model catalogue (``GET {TAU2_HF_ROUTER_URL}/models``), read.

No database here: :func:`catalogue_fetch` gets the payload over HTTP, never with a token;
:func:`catalogue_parse` turns it into :class:`RouterModel` rows, keeping only what the
product can use (chat models with a live provider that supports tools).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import httpx
from django.conf import settings

from tau2_env.config import hf_router_url

__all__ = [
    "CatalogueError",
    "RouterModel",
    "RouterOffer",
    "catalogue_fetch",
    "catalogue_parse",
    "catalogue_url",
]

LIVE = "live"


class CatalogueError(ValueError):
    """The router answered, but not with a catalogue we can read."""


@dataclass(frozen=True)
class RouterOffer:
    """One provider serving a model, as the router describes it.

    ``input_price`` / ``output_price`` are USD per 1M tokens, both ``None`` when the
    router gives no complete price (unpriced is not free).
    """

    provider: str
    live: bool
    context_length: int | None
    input_price: Decimal | None
    output_price: Decimal | None
    supports_tools: bool
    supports_structured_output: bool
    first_token_latency_ms: float | None
    throughput: float | None

    @property
    def usable(self) -> bool:
        """Live and able to call tools: an agent of τ²-bench can run on it."""
        return self.live and self.supports_tools


@dataclass(frozen=True)
class RouterModel:
    name: str
    owned_by: str
    offers: tuple[RouterOffer, ...]


def catalogue_url() -> str:
    return f"{hf_router_url()}/models"


def catalogue_fetch(*, client: httpx.Client | None = None) -> Any:
    """The router's decoded JSON answer.

    Raises ``httpx.HTTPError`` when the router cannot be reached or answers an error
    status, :class:`CatalogueError` when the body is not JSON. No credential is sent:
    the catalogue is public, and a visitor's token must never leave for a listing.
    """
    own_client = client is None
    client = client or httpx.Client(timeout=settings.TAU2_MODELS_TIMEOUT)
    try:
        response = client.get(
            catalogue_url(),
            headers={"Accept": "application/json"},
            timeout=settings.TAU2_MODELS_TIMEOUT,
        )
        response.raise_for_status()
        try:
            return response.json()
        except ValueError as exc:
            raise CatalogueError(f"the router's /models answer is not JSON: {exc}") from exc
    finally:
        if own_client:
            client.close()


def catalogue_parse(payload: Any) -> list[RouterModel]:
    """The chat models of ``payload`` with at least one live provider that supports tools.

    Every provider of a kept model is returned (with its status), so the catalogue can
    say which ones are down. Entries that are malformed are skipped; a payload without a
    ``data`` list raises :class:`CatalogueError`.
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
        raise CatalogueError("the router's /models answer has no 'data' list")
    models: dict[str, RouterModel] = {}
    for entry in payload["data"]:
        model = _model(entry)
        if model is not None and any(offer.usable for offer in model.offers):
            models.setdefault(model.name, model)
    return list(models.values())


def _model(entry: Any) -> RouterModel | None:
    if not isinstance(entry, dict):
        return None
    name = entry.get("id")
    if not isinstance(name, str) or "/" not in name.strip("/") or len(name) > 200:
        return None
    if not _is_chat(entry):
        return None
    offers: dict[str, RouterOffer] = {}
    for raw in entry.get("providers") or []:
        offer = _offer(raw)
        if offer is not None:
            offers.setdefault(offer.provider, offer)
    owned_by = entry.get("owned_by")
    return RouterModel(
        name=name,
        owned_by=(owned_by if isinstance(owned_by, str) else name.split("/", 1)[0])[:100],
        offers=tuple(offers.values()),
    )


def _is_chat(entry: dict[str, Any]) -> bool:
    """A model that answers in text. The router lists chat models; embedders and image
    generators that slip in say so in ``architecture.output_modalities``."""
    architecture = entry.get("architecture")
    if not isinstance(architecture, dict):
        return True
    outputs = architecture.get("output_modalities")
    if not isinstance(outputs, list):
        return True
    return "text" in outputs


def _offer(raw: Any) -> RouterOffer | None:
    if not isinstance(raw, dict):
        return None
    provider = raw.get("provider")
    if not isinstance(provider, str) or not provider.strip() or len(provider) > 64:
        return None
    pricing = raw.get("pricing") if isinstance(raw.get("pricing"), dict) else {}
    input_price, output_price = _price(pricing.get("input")), _price(pricing.get("output"))
    if input_price is None or output_price is None:
        # Half a price cannot give a cost: the offer is unpriced.
        input_price = output_price = None
    return RouterOffer(
        provider=provider.strip(),
        live=raw.get("status") == LIVE,
        context_length=_positive_int(raw.get("context_length")),
        input_price=input_price,
        output_price=output_price,
        supports_tools=raw.get("supports_tools") is True,
        supports_structured_output=raw.get("supports_structured_output") is True,
        first_token_latency_ms=_positive_float(raw.get("first_token_latency_ms")),
        throughput=_positive_float(raw.get("throughput")),
    )


def _price(value: Any) -> Decimal | None:
    """USD per 1M tokens, or ``None`` when absent or unreadable (never a guessed 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        price = Decimal(str(value))
    except InvalidOperation:
        return None
    if not price.is_finite() or price < 0 or price >= Decimal("1000000"):
        return None
    return price.quantize(Decimal("0.000001"))


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value <= 0 or value > 2**31 - 1:
        return None
    return int(value)


def _positive_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return float(value)
