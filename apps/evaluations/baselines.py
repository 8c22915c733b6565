"""Baselines and verdicts: an evaluation pinned as the one later comparable ones are
judged against, and the judgement.

* :func:`baseline_pin` / :func:`baseline_unpin` — the writes. One baseline per identity
  (the domain and ``pooling.Identity``: an evaluation is judged only against one it would
  be ranked and pooled with); pinning another of the same identity replaces it.
* :func:`judge` — :class:`Verdict` ("better", "worse" or "indistinguishable" against the
  baseline, by the paired bootstrap of pass^1 over the tasks both scored, as compare
  shows it), or :class:`NoVerdict` saying why there is none.
* :func:`verdict_for` — the verdict or ``None``: what other code (notifications'
  "regressed against baseline") calls.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction

from apps.accounts.access import can_control
from apps.evaluations.models import Baseline, Evaluation
from apps.evaluations.pooling import differences, identity_of
from apps.evaluations.selectors import TaskOutcome, evaluation_cost_per_run, task_outcomes
from apps.evaluations.significance import Difference, difference_sentence, paired_difference

__all__ = [
    "NoVerdict",
    "Verdict",
    "baseline_pin",
    "baseline_unpin",
    "identity_key",
    "judge",
    "verdict_for",
]

Outcome = Literal["better", "worse", "indistinguishable"]
OUTCOME_LABELS: dict[str, str] = {
    "better": "better",
    "worse": "worse",
    "indistinguishable": "not distinguishable",
}


def identity_key(evaluation: Evaluation) -> str:
    """What an evaluation's baseline is looked up by: a sha256 of its domain and
    ``pooling.Identity.key`` (two evaluations with one key would be ranked together)."""
    parts = [evaluation.domain, *identity_of(evaluation).key]
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()


# --- writes ------------------------------------------------------------------------------


def _may_unpin(user, baseline: Baseline) -> bool:
    """Whoever pinned it, whoever started its evaluation, or staff."""
    return can_control(user, owner_id=baseline.pinned_by_id) or can_control(
        user, owner_id=baseline.evaluation.created_by_id
    )


def baseline_pin(*, evaluation: Evaluation, by) -> Baseline:
    """Pin ``evaluation`` as the baseline of its identity, replacing the one pinned there.

    Raises ``PermissionDenied`` unless ``by`` started it or is staff, and, when another
    evaluation is the baseline, unless ``by`` may unpin that one too (whoever pinned it,
    its starter, or staff). Pinning the baseline again changes nothing.
    """
    if not can_control(by, owner_id=evaluation.created_by_id):
        raise PermissionDenied("Only whoever started this evaluation, or staff, may pin it.")
    key = identity_key(evaluation)
    with transaction.atomic():
        current = (
            Baseline.objects.select_for_update()
            .select_related("evaluation")
            .filter(identity_key=key)
            .first()
        )
        if current is not None and current.evaluation_id == evaluation.pk:
            return current
        if current is not None:
            if not _may_unpin(by, current):
                raise PermissionDenied(
                    f"Evaluation {current.evaluation_id} is the baseline for these settings; "
                    "only whoever pinned it, whoever started it, or staff may replace it."
                )
            current.delete()
        try:
            with transaction.atomic():
                return Baseline.objects.create(
                    evaluation=evaluation, domain=evaluation.domain, identity_key=key, pinned_by=by
                )
        except IntegrityError:  # another pin of the same identity committed meanwhile
            raise ValidationError(
                "Another evaluation was pinned as this baseline at the same moment; "
                "reload and try again."
            ) from None


def baseline_unpin(*, evaluation: Evaluation, by) -> bool:
    """Unpin ``evaluation`` (whoever pinned it, its starter, or staff; else
    ``PermissionDenied``). Returns whether it was the baseline."""
    baseline = Baseline.objects.select_related("evaluation").filter(evaluation=evaluation).first()
    if baseline is None:
        return False
    if not _may_unpin(by, baseline):
        raise PermissionDenied(
            "Only whoever pinned this baseline, whoever started it, or staff may unpin it."
        )
    baseline.delete()
    return True


# --- reads -------------------------------------------------------------------------------


@dataclass(frozen=True)
class NoVerdict:
    """Why an evaluation has no verdict: no baseline for its identity, it is the baseline,
    the baseline differs (``baseline_id`` then names the nearest one), or no task has
    been scored on both sides yet."""

    reason: str
    baseline_id: int | None = None
    is_baseline: bool = False


@dataclass(frozen=True)
class Verdict:
    """An evaluation judged against its baseline.

    ``outcome`` is "better" or "worse" when the paired bootstrap interval of pass^1
    (this − baseline, over the tasks both scored, ``difference``) leaves out 0, else
    "indistinguishable"; ``differences`` are the same for every k both have. ``regressed``
    are the tasks the baseline passed on every scored trial and this one failed on every
    one, ``fixed`` the other way round (as compare marks flips). Costs are USD per run
    over the runs whose every call was priced (``None``: nothing priced). ``provisional``
    when this evaluation or the baseline has not ended: runs still to come may change it.
    """

    evaluation_id: int
    baseline_id: int
    outcome: Outcome
    difference: Difference
    differences: tuple[Difference, ...]
    regressed: tuple[str, ...]
    fixed: tuple[str, ...]
    cost_per_run: Decimal | None
    baseline_cost_per_run: Decimal | None
    provisional: bool

    @property
    def label(self) -> str:
        return OUTCOME_LABELS[self.outcome]

    @property
    def regression(self) -> bool:
        return self.outcome == "worse"

    @property
    def sentence(self) -> str:
        """E.g. "Worse than the baseline (evaluation 12): the baseline is ahead by 50
        points, 95% CI … (provisional: this evaluation has not ended)." """
        said = difference_sentence(self.difference, a="the baseline", b="this evaluation")
        head = (
            f"{self.label.capitalize()} than the baseline"
            if self.outcome != "indistinguishable"
            else "Not distinguishable from the baseline"
        )
        tail = " Provisional: runs still to come may change it." if self.provisional else ""
        return f"{head} (evaluation {self.baseline_id}): {said[0].lower()}{said[1:]}{tail}"

    def as_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "label": self.label,
            "provisional": self.provisional,
            "baseline": self.baseline_id,
            "k": self.difference.k,
            "pass_hat_k": {"baseline": self.difference.a, "this": self.difference.b},
            "delta": self.difference.delta,
            "interval": [self.difference.low, self.difference.high],
            "confidence": self.difference.confidence,
            "tasks": self.difference.tasks,
            "by_k": {
                str(d.k): {
                    "baseline": d.a,
                    "this": d.b,
                    "delta": d.delta,
                    "interval": [d.low, d.high],
                }
                for d in self.differences
            },
            "regressed": list(self.regressed),
            "fixed": list(self.fixed),
            "cost_per_run_usd": _money(self.cost_per_run),
            "baseline_cost_per_run_usd": _money(self.baseline_cost_per_run),
            "sentence": self.sentence,
        }


def _money(value: Decimal | None) -> str | None:
    return None if value is None else f"{value:.6f}"


def _rewards(outcomes: dict[str, TaskOutcome]) -> dict[str, list[float]]:
    return {
        task_id: [1.0 if ok else 0.0 for _, ok in outcome.runs]
        for task_id, outcome in outcomes.items()
        if outcome.scored
    }


# How many of a domain's baselines are read to find an evaluation's (one query): far
# more identities than a team pins on one domain.
DOMAIN_BASELINES = 200


def _domain_baselines(evaluation: Evaluation) -> list[Baseline]:
    return list(
        Baseline.objects.select_related("evaluation", "evaluation__user_connection")
        .filter(domain=evaluation.domain)
        .order_by("-pinned_at", "-pk")[:DOMAIN_BASELINES]
    )


def _not_comparable(evaluation: Evaluation, others: list[Baseline]) -> NoVerdict:
    """No baseline of this identity: the nearest one of the domain and what differs."""
    if not others:
        return NoVerdict(f"No baseline is pinned for {evaluation.domain} yet.")
    this = identity_of(evaluation)
    found = [(differences(this, identity_of(b.evaluation)), b) for b in others]
    found.sort(key=lambda pair: len(pair[0]))  # stable: the latest pinned of the nearest
    differs, nearest = found[0]
    return NoVerdict(
        f"Not comparable with the baseline for {evaluation.domain} (evaluation "
        f"{nearest.evaluation_id}): {'; '.join(differs)}.",
        baseline_id=nearest.evaluation_id,
    )


def judge(evaluation: Evaluation) -> Verdict | NoVerdict:
    """``evaluation`` against the baseline of its identity (see :class:`Verdict`), or
    why not (:class:`NoVerdict`). A fixed number of queries: the domain's baselines (the
    only one without a baseline to judge against), then each side's scored runs and
    costs."""
    others = _domain_baselines(evaluation)
    key = identity_key(evaluation)
    baseline = next((b for b in others if b.identity_key == key), None)
    if baseline is None:
        return _not_comparable(evaluation, others)
    if baseline.evaluation_id == evaluation.pk:
        return NoVerdict(
            "This evaluation is the baseline: later comparable ones are judged against it.",
            baseline_id=evaluation.pk,
            is_baseline=True,
        )
    base = baseline.evaluation
    before, now = task_outcomes(base), task_outcomes(evaluation)
    a, b = _rewards(before), _rewards(now)
    top = min((len(v) for v in (*a.values(), *b.values())), default=0)
    found = tuple(
        d for d in (paired_difference(a, b, k=k) for k in range(1, top + 1)) if d is not None
    )
    if not found:
        return NoVerdict(
            f"No task has been scored both here and in the baseline (evaluation {base.pk}) yet.",
            baseline_id=base.pk,
        )
    first = found[0]
    outcome: Outcome = (
        "indistinguishable" if not first.distinguishable else "better" if first.low > 0 else "worse"
    )
    shared = [t for t in before if t in now]
    return Verdict(
        evaluation_id=evaluation.pk,
        baseline_id=base.pk,
        outcome=outcome,
        difference=first,
        differences=found,
        regressed=tuple(t for t in shared if before[t].passes_all and now[t].fails_all),
        fixed=tuple(t for t in shared if before[t].fails_all and now[t].passes_all),
        cost_per_run=evaluation_cost_per_run(evaluation),
        baseline_cost_per_run=evaluation_cost_per_run(base),
        provisional=not (evaluation.is_final and base.is_final),
    )


def verdict_for(evaluation: Evaluation) -> Verdict | None:
    """The verdict against the baseline, or ``None`` (no baseline of its identity, it is
    the baseline, or nothing scored on both sides yet: :func:`judge` says which)."""
    found = judge(evaluation)
    return found if isinstance(found, Verdict) else None
