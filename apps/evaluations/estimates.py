"""What an evaluation may cost before it starts (a read: nothing here writes).

The cost of a run is its agent tokens at the agent provider's prices
(``apps.inference.pricing.cost_usd``, as every run is charged); the simulated customer's
tokens are not in it. How many tokens a run takes is the assumption:

* the team's own completed model runs of the domain, when there are at least
  ``MIN_SAMPLE`` (the latest ``SAMPLE`` of them): each run's tokens at the chosen
  prices, and the range from their 10th to their 90th percentile, per run;
* otherwise a stated default per run: ``DEFAULT_TOKENS`` — a τ² conversation resends
  the policy, the tool schemas and the conversation so far at every agent turn, so
  input tokens dominate (tens of turns × several thousand tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from apps.inference.pricing import PricePair, cost_usd, dollars
from apps.runs.models import Run

MIN_SAMPLE = 3
SAMPLE = 200
# (input, output) tokens per run: low and high, when the team has no runs to go by.
DEFAULT_TOKENS = ((50_000, 1_000), (400_000, 10_000))


@dataclass(frozen=True)
class CostEstimate:
    """``low`` / ``high`` USD for the whole evaluation (``None`` both when unpriced);
    ``basis`` says where the tokens per run came from, for the page to show."""

    runs: int
    low: Decimal | None
    high: Decimal | None
    basis: str
    sample_runs: int = 0

    @property
    def priced(self) -> bool:
        return self.low is not None

    @property
    def label(self) -> str:
        """``$1.20 – $9.60``, ``$0.0042 – $0.034``; ``unpriced`` without prices."""
        if self.low is None or self.high is None:
            return "unpriced"
        return f"{dollars(self.low)} – {dollars(self.high)}"


def evaluation_cost_estimate(*, domain: str, runs: int, prices: PricePair | None) -> CostEstimate:
    """An estimated cost range of ``runs`` runs of ``domain`` at ``prices``."""
    if prices is None or prices[0] is None or prices[1] is None:
        return CostEstimate(runs=runs, low=None, high=None, basis="unpriced")
    sample = list(
        Run.objects.filter(
            kind=Run.Kind.MODEL,
            domain=domain,
            status=Run.Status.COMPLETED,
            prompt_tokens__gt=0,
            fork_seq__isnull=True,  # a fork's tokens are those of a part of a conversation
        )
        .order_by("-finished_at", "-id")
        .values_list("prompt_tokens", "completion_tokens")[:SAMPLE]
    )
    if len(sample) >= MIN_SAMPLE:
        per_run = sorted(
            cost_usd(prompt_tokens=p, completion_tokens=c, prices=prices) for p, c in sample
        )
        low, high = _percentile(per_run, 0.1), _percentile(per_run, 0.9)
        basis = (
            f"tokens per run from the team's last {len(sample)} completed runs of {domain} "
            "(10th to 90th percentile)"
        )
    else:
        (low_in, low_out), (high_in, high_out) = DEFAULT_TOKENS
        low = cost_usd(prompt_tokens=low_in, completion_tokens=low_out, prices=prices)
        high = cost_usd(prompt_tokens=high_in, completion_tokens=high_out, prices=prices)
        basis = (
            f"assuming {low_in // 1000}k–{high_in // 1000}k input and "
            f"{low_out // 1000}k–{high_out // 1000}k output tokens per run, as the team has "
            f"no completed runs of {domain} to go by yet"
        )
    return CostEstimate(
        runs=runs, low=low * runs, high=high * runs, basis=basis, sample_runs=len(sample)
    )


def _percentile(values: list[Decimal], q: float) -> Decimal:
    """The nearest-rank ``q`` quantile of sorted ``values``."""
    index = min(len(values) - 1, max(0, round(q * (len(values) - 1))))
    return values[index]
