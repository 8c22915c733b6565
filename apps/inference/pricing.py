"""Prices of Inference Providers: per 1M tokens, from the router's catalogue only.

A missing price is ``None`` everywhere — unpriced, never $0 — and a cost computed from
it is ``None`` too.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Protocol, TypeVar

__all__ = ["Priced", "cheapest_offer", "cost_usd", "dollars", "money_label", "price_label"]

PricePair = tuple[Decimal, Decimal]
MILLION = Decimal(1_000_000)


class Priced(Protocol):
    provider: str
    input_price: Decimal | None
    output_price: Decimal | None


T = TypeVar("T", bound=Priced)


def cheapest_offer(offers: Iterable[T]) -> T | None:
    """The priced offer the router's ``:cheapest`` policy would take, or ``None``.

    Lowest output price (what the router ranks by), then lowest input price, then
    provider name so the answer is stable. Unpriced offers never win.
    """
    priced = [o for o in offers if o.input_price is not None and o.output_price is not None]
    if not priced:
        return None
    return min(priced, key=lambda o: (o.output_price, o.input_price, o.provider))


def cost_usd(
    *, prompt_tokens: int, completion_tokens: int, prices: PricePair | None
) -> Decimal | None:
    """USD for the tokens at ``prices`` (input, output per 1M), or ``None`` when unpriced.

    Exact (not rounded): a short turn of a cheap model costs far less than a cent, and a
    rounded 0 would read as free. Round where it is stored or shown.
    """
    if prices is None or prices[0] is None or prices[1] is None:
        return None
    if prompt_tokens < 0 or completion_tokens < 0:
        raise ValueError("token counts cannot be negative")
    input_price, output_price = prices
    cost = (
        Decimal(prompt_tokens) * input_price + Decimal(completion_tokens) * output_price
    ) / MILLION
    return cost


def dollars(amount: Decimal) -> str:
    """Cents from a dollar up; below, two significant digits (never a rounded $0.00):
    ``$1,234.50``, ``$0.27``, ``$0.000032``."""
    if amount >= 1:
        return f"${amount:,.2f}"
    if amount <= 0:
        return "$0"
    return f"${amount:.{max(2, 1 - amount.adjusted())}f}"


def money_label(amount) -> str:
    """:func:`dollars` of a cost (a ``Decimal``, a number or its text), or ``unpriced``
    when there is none: a cost without a price is unknown, never $0."""
    if amount is None or amount == "":
        return "unpriced"
    return dollars(amount if isinstance(amount, Decimal) else Decimal(str(amount)))


def _dollars(price: Decimal) -> str:
    """$0.27, $1.1 → $1.10, $0.035 stays $0.035 (never rounded down to $0.00)."""
    text = format(price.normalize(), "f")
    whole, _, cents = text.partition(".")
    return f"${whole}.{cents.ljust(2, '0')}"


def price_label(input_price: Decimal | None, output_price: Decimal | None) -> str:
    """``$0.27 / $1.10`` (per 1M tokens, input / output), or ``unpriced``."""
    if input_price is None or output_price is None:
        return "unpriced"
    return f"{_dollars(input_price)} / {_dollars(output_price)}"
