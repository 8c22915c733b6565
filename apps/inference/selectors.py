"""Reads of the model catalogue: the picker, prices, and what a picked value means.

Prices are USD per 1M tokens as ``Decimal``; ``None`` means unpriced — never $0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from django.db.models import Max, Prefetch

from apps.inference.models import InferenceModel, ProviderOffer
from apps.inference.pricing import PricePair, cheapest_offer, cost_usd, price_label

__all__ = [
    "POLICIES",
    "ModelChoice",
    "OfferChoice",
    "ResolvedModel",
    "catalogue_refreshed_at",
    "cost_usd",
    "model_choices",
    "offer_price",
    "resolve_agent_model",
]

POLICIES = ("fastest", "cheapest")
_MODEL_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_PROVIDER_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


@dataclass(frozen=True)
class OfferChoice:
    """A live, tool-capable provider of a model, as the picker shows it."""

    provider: str
    value: str  # "org/model:provider"
    input_price: Decimal | None
    output_price: Decimal | None
    context_length: int | None
    supports_structured_output: bool
    first_token_latency_ms: float | None
    throughput: float | None

    @property
    def is_priced(self) -> bool:
        return self.input_price is not None and self.output_price is not None

    @property
    def price_label(self) -> str:
        """``$in / $out`` per 1M tokens, or ``unpriced``."""
        return price_label(self.input_price, self.output_price)


@dataclass(frozen=True)
class ModelChoice:
    """One model of the picker with its usable providers, cheapest first.

    ``input_price`` / ``output_price`` are the cheapest priced provider's ("from"), both
    ``None`` when no provider has a price. A fallback model has no known provider.
    """

    name: str
    owned_by: str
    is_fallback: bool
    offers: tuple[OfferChoice, ...]
    input_price: Decimal | None
    output_price: Decimal | None

    @property
    def provider_count(self) -> int:
        return len(self.offers)

    @property
    def is_priced(self) -> bool:
        return self.input_price is not None

    @property
    def providers_label(self) -> str:
        if self.is_fallback:
            return "providers unknown"
        count = self.provider_count
        return f"{count} provider" if count == 1 else f"{count} providers"

    @property
    def price_label(self) -> str:
        """``from $in / $out`` (per 1M tokens, cheapest priced provider), or ``unpriced``."""
        if not self.is_priced:
            return "unpriced"
        return f"from {price_label(self.input_price, self.output_price)}"

    @property
    def label(self) -> str:
        """``model · N providers · from $in / $out`` (or ``· unpriced``)."""
        return f"{self.name} · {self.providers_label} · {self.price_label}"

    @property
    def policies(self) -> tuple[tuple[str, str], ...]:
        """(value, label) of the router's policies for this model."""
        return (
            (f"{self.name}:fastest", "fastest provider"),
            (f"{self.name}:cheapest", "cheapest provider"),
        )


@dataclass(frozen=True)
class ResolvedModel:
    """What a picked value means for a run.

    ``model`` is the Hub id, ``provider`` the pinned provider (or ``None``), ``policy``
    ``"fastest"`` / ``"cheapest"`` (or ``None``); ``value`` is what to send to the router.
    ``prices`` (input, output per 1M tokens) are the ones to charge, from the provider
    named by ``priced_provider``; ``None`` when it cannot be known in advance (the router
    picks) or that provider has no price — the run's cost is then unpriced.
    """

    model: str
    provider: str | None
    policy: Literal["fastest", "cheapest"] | None
    prices: PricePair | None
    priced_provider: str | None

    @property
    def value(self) -> str:
        suffix = self.provider or self.policy
        return f"{self.model}:{suffix}" if suffix else self.model

    @property
    def price_label(self) -> str:
        if self.prices is None:
            return "unpriced"
        return price_label(*self.prices)


def _usable_offers() -> Prefetch:
    return Prefetch(
        "offers",
        queryset=ProviderOffer.objects.filter(
            status=ProviderOffer.Status.LIVE, supports_tools=True
        ).order_by("provider"),
        to_attr="usable_offers",
    )


def _price_order(offer: ProviderOffer):
    """Priced providers first, cheapest as the router ranks them; unpriced last, by name."""
    if offer.is_priced:
        return (0, offer.output_price, offer.input_price, offer.provider)
    return (1, Decimal(0), Decimal(0), offer.provider)


def _choice(model: InferenceModel) -> ModelChoice:
    offers = sorted(model.usable_offers, key=_price_order)
    cheapest = cheapest_offer(offers)
    return ModelChoice(
        name=model.name,
        owned_by=model.owned_by,
        is_fallback=model.is_fallback,
        offers=tuple(
            OfferChoice(
                provider=o.provider,
                value=f"{model.name}:{o.provider}",
                input_price=o.input_price,
                output_price=o.output_price,
                context_length=o.context_length,
                supports_structured_output=o.supports_structured_output,
                first_token_latency_ms=o.first_token_latency_ms,
                throughput=o.throughput,
            )
            for o in offers
        ),
        input_price=cheapest.input_price if cheapest else None,
        output_price=cheapest.output_price if cheapest else None,
    )


def model_choices(*, q: str = "") -> list[ModelChoice]:
    """Every stored model with its live tool-capable providers, by name.

    ``q``: words that must all appear in the model id (case-insensitive).
    A model whose providers all went down since the last refresh is left out; fallback
    models (no known provider) are listed.
    """
    models = InferenceModel.objects.prefetch_related(_usable_offers()).order_by("name")
    for word in q.split()[:10]:
        models = models.filter(name__icontains=word)
    choices = [_choice(m) for m in models]
    return [c for c in choices if c.is_fallback or c.offers]


def catalogue_refreshed_at():
    """When the stored catalogue was last written, or ``None`` when it is empty."""
    return InferenceModel.objects.aggregate(at=Max("refreshed_at"))["at"]


def offer_price(*, model_id: str, provider: str) -> PricePair | None:
    """(input, output) USD per 1M tokens of ``provider`` serving ``model_id``.

    ``None`` when the catalogue has no such offer or it has no price. The offer's
    status is not checked: a run that was answered by a provider is charged its price.
    """
    offer = (
        ProviderOffer.objects.filter(model__name=model_id, provider=provider)
        .only("input_price", "output_price")
        .first()
    )
    if offer is None or not offer.is_priced:
        return None
    return (offer.input_price, offer.output_price)


def _find_model(name: str) -> InferenceModel:
    """The stored model named ``name``; Hub ids are case-insensitive, the exact case wins."""
    found = list(
        InferenceModel.objects.filter(name__iexact=name).prefetch_related(_usable_offers())
    )
    for candidate in found:
        if candidate.name == name:
            return candidate
    if found:
        return found[0]
    raise ValueError(
        f"{name} is not in the catalogue of models with a live provider that can call tools."
    )


def resolve_agent_model(value: str) -> ResolvedModel:
    """Parse a picked agent model and check it against the catalogue.

    ``org/model`` (the router picks a provider), ``org/model:provider`` (pinned: must be a
    live provider of that model that supports tools), ``org/model:fastest`` or
    ``org/model:cheapest`` (the router's policies). Prices: the pinned provider's; for
    ``:cheapest`` the cheapest priced provider's; ``None`` for a plain model or
    ``:fastest``, where the provider is not known until the router answers.

    Raises ``ValueError`` with a message fit for the visitor.
    """
    text = (value or "").strip()
    if not text:
        raise ValueError("Choose an agent model.")
    name, _, suffix = text.partition(":")
    name, suffix = name.strip(), suffix.strip()
    if not _MODEL_RE.match(name):
        raise ValueError(f"{name or text!r} is not a model id of the form org/model.")
    if _ and not suffix:
        raise ValueError(f"Name a provider after the colon in {text!r}, or remove the colon.")
    model = _find_model(name)
    offers = {o.provider: o for o in model.usable_offers}
    if not suffix:
        if not model.is_fallback and not offers:
            raise ValueError(f"{model.name} has no live provider that can call tools right now.")
        return ResolvedModel(
            model=model.name, provider=None, policy=None, prices=None, priced_provider=None
        )
    if suffix.lower() in POLICIES:
        policy = suffix.lower()
        cheapest = cheapest_offer(offers.values()) if policy == "cheapest" else None
        return ResolvedModel(
            model=model.name,
            provider=None,
            policy=policy,
            prices=(cheapest.input_price, cheapest.output_price) if cheapest else None,
            priced_provider=cheapest.provider if cheapest else None,
        )
    provider = suffix.lower()
    if not _PROVIDER_RE.match(provider):
        raise ValueError(f"{suffix!r} is not a provider name.")
    if model.is_fallback:
        raise ValueError(
            f"The providers of {model.name} are unknown until the model catalogue is "
            f"refreshed; choose {model.name} without a provider, or :fastest / :cheapest."
        )
    offer = offers.get(provider)
    if offer is None:
        why = _why_not_usable(model, provider)
        available = ", ".join(sorted(offers)) or "none"
        raise ValueError(f"{provider} {why} {model.name}. Providers that can run it: {available}.")
    prices = (offer.input_price, offer.output_price) if offer.is_priced else None
    return ResolvedModel(
        model=model.name, provider=provider, policy=None, prices=prices, priced_provider=provider
    )


def _why_not_usable(model: InferenceModel, provider: str) -> str:
    stored = model.offers.filter(provider=provider).first()
    if stored is None:
        return "does not serve"
    if stored.status != ProviderOffer.Status.LIVE:
        return "is not live for"
    return "cannot call tools with"
