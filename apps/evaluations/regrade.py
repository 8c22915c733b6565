"""Re-grade an evaluation on this server's task set: its stored conversations scored again.

An evaluation keeps the τ² version and task-set hash it was scored on
(``provenance["tau2_version"]``, ``["task_set_hash"]``). When the server's catalogue has
moved on (τ² 0.2's tasks → 1.0.1's, whose airline and retail criteria were rewritten), the
same conversations may score differently. A re-grade does what ``tau2 evaluate-trajs
--fresh-tasks`` does: each stored conversation is replayed in a fresh environment against
the current task definitions and scored by τ²'s evaluator (strict replay: every tool result
must come out as it did), through the import path (:mod:`apps.evaluations.imports`) that
scores ``tau2 run`` files — the evaluation's own τ² results file is what it reads. The result
is a new evaluation, linked to the old one (``provenance["regrade"]``), with the tasks whose
outcome flipped and why.

A task whose reward needs τ²'s NL-assertion judge (1.0.1's retail, nearly all of it) is
re-scored only when the person names a judge, as a run's judge is named; τ²'s own
evaluator asks it (``tau2 evaluate-trajs`` sends the same request), its calls kept on the
new runs and counted against the judge connection's budgets. Without one those runs are
not re-scored, each saying why.

The job runs on a worker (:mod:`apps.evaluations.jobs`, kind ``REGRADE``): a large
evaluation re-scores for minutes.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from apps.evaluations.models import Evaluation
from apps.evaluations.significance import task_order
from apps.runs.models import Run
from apps.tasks.models import Task
from apps.tasks.selectors import task_set_installed as current_task_set
from tau2_env.engine.evaluation import is_successful

__all__ = [
    "current_task_set",
    "regrade_flips",
    "regrade_refusal",
    "runs_needing_judge",
    "task_set_of",
]


def task_set_of(evaluation: Evaluation) -> tuple[str, str]:
    """The τ² version and task-set hash ``evaluation`` was scored on."""
    provenance = evaluation.provenance or {}
    return str(provenance.get("tau2_version") or ""), str(provenance.get("task_set_hash") or "")


def regrade_refusal(evaluation: Evaluation) -> str | None:
    """Why ``evaluation`` cannot be re-graded here, in words; ``None`` when it can."""
    if evaluation.status not in Evaluation.FINAL:
        return "It is still going: re-grade it once it has ended."
    if evaluation.mode != Run.Mode.DEFAULT:
        return "Only evaluations of τ²'s default agent and customer are re-graded here."
    version, task_set = task_set_of(evaluation)
    here_version, here_set = current_task_set()
    if task_set == here_set and version == here_version:
        return (
            f"It was scored on this server's task set (τ² {here_version}) already: "
            "a re-grade would score the same conversations against the same tasks."
        )
    if not Run.objects.filter(evaluation=evaluation, status=Run.Status.COMPLETED).exists():
        return "It has no completed runs to score again."
    return None


def runs_needing_judge(evaluation: Evaluation) -> int:
    """How many of ``evaluation``'s completed runs are of a task whose reward, on this
    server's task set, needs τ²'s NL-assertion judge: what a re-grade re-scores only with
    a judge (τ² 1.0.1's retail: 112 of its 114 tasks)."""
    # Read in Python: a JSON list's "contains" is PostgreSQL's, and a laptop runs SQLite.
    counts = Counter(
        Run.objects.filter(evaluation=evaluation, status=Run.Status.COMPLETED).values_list(
            "task_id", flat=True
        )
    )
    bases = Task.objects.filter(pk__in=counts).values_list("pk", "reward_basis")
    return sum(counts[pk] for pk, basis in bases if "NL_ASSERTION" in (basis or []))


def _breakdown(reward_info: dict | None) -> dict[str, float]:
    breakdown = (reward_info or {}).get("reward_breakdown") or {}
    return {str(k): float(v) for k, v in breakdown.items() if v is not None}


def _why(old: Run, new: Run) -> str:
    """What made the outcome change, from the two verdicts' reward bases."""
    before, after = _breakdown(old.reward_info), _breakdown(new.reward_info)
    parts = []
    for basis in sorted(set(before) | set(after)):
        was, now = before.get(basis), after.get(basis)
        if was == now:
            continue
        if was is None:
            parts.append(f"{basis} is now scored ({now:g})")
        elif now is None:
            parts.append(f"{basis} is no longer scored (was {was:g})")
        else:
            parts.append(f"{basis} {was:g} → {now:g}")
    if not parts:
        note = ((new.provenance or {}).get("rescore") or {}).get("note") or ""
        return note or "the same components, a different reward"
    return "; ".join(parts)


def regrade_flips(old: Evaluation, new: Evaluation) -> list[dict[str, Any]]:
    """The runs (task, trial) whose success changed between ``old`` and its re-grade ``new``."""
    before = {
        (r.task.task_id, r.trial): r
        for r in Run.objects.filter(evaluation=old, status=Run.Status.COMPLETED).select_related(
            "task"
        )
    }
    flips = []
    for run in Run.objects.filter(evaluation=new).select_related("task").order_by("trial", "id"):
        previous = before.get((run.task.task_id, run.trial))
        if previous is None or previous.reward is None or run.reward is None:
            continue
        was, now = is_successful(previous.reward), is_successful(run.reward)
        if was != now:
            flips.append(
                {
                    "task_id": run.task.task_id,
                    "trial": run.trial,
                    "old_run": previous.pk,
                    "new_run": run.pk,
                    "old_reward": previous.reward,
                    "new_reward": run.reward,
                    "direction": "passes now" if now else "fails now",
                    "why": _why(previous, run),
                }
            )
    return sorted(flips, key=lambda f: (task_order(f["task_id"]), f["trial"]))
