"""Reads of training sessions: the list, one session, and what its page shows (the
reward curve with its moving average, reward by task, pace, tokens and the customer's
cost, the splits and what the split guard says of them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.db.models import Count, Max, Q, QuerySet
from django.shortcuts import get_object_or_404

from apps.evaluations.models import Evaluation
from apps.tasks.models import Split
from apps.training.models import TrainingEpisode, TrainingSession

# Episodes the moving average spans (the last ones scored, up to each point).
MOVING_WINDOW = 10
EPISODES_SHOWN = 50  # the newest, in the page's table


def evaluations_on_split(*, domain: str, split: str) -> list[Evaluation]:
    """The team's evaluations drawing ``domain``'s tasks from ``split``, oldest first."""
    if not split:
        return []
    return list(
        Evaluation.objects.filter(domain=domain, split=split)
        .only("pk", "name", "split")
        .order_by("pk")
    )


def evaluations_using(*, domain: str, split: str, task_id: str) -> list[Evaluation]:
    """The team's evaluations whose split is ``split`` or holds task ``task_id`` (its
    own split, or one such as ``base`` that holds every task), oldest first: training
    on the task leaks into each of them."""
    holding = Split.objects.filter(domain_id=domain, tasks__task_id=task_id).values("name")
    return list(
        Evaluation.objects.filter(domain=domain)
        .filter(Q(split=split) | Q(split__in=holding))
        .exclude(split="")
        .only("pk", "name", "split")
        .order_by("pk")
    )


def training_session_list() -> QuerySet[TrainingSession]:
    """The team's training sessions, latest episode first, with their episode counts."""
    return (
        TrainingSession.objects.select_related("owner", "key")
        .annotate(n_episodes=Count("episodes"), last_run=Max("episodes__run_id"))
        .order_by("-last_episode_at", "-id")
    )


def training_session_get(*, pk: int) -> TrainingSession:
    """Training session ``pk`` (404 when there is none)."""
    return get_object_or_404(TrainingSession.objects.select_related("owner", "key"), pk=pk)


@dataclass(frozen=True)
class CurvePoint:
    episode: int  # 1-based, in the order the episodes started
    run_id: int
    task_id: str
    reward: float
    average: float  # of the last MOVING_WINDOW scored rewards up to this one


@dataclass(frozen=True)
class TaskReward:
    task_id: str
    episodes: int
    mean: float


@dataclass(frozen=True)
class EpisodeRow:
    episode: int
    run_id: int
    task_id: str
    split: str
    status: str
    reward: float | None
    warned: bool
    started: datetime


@dataclass(frozen=True)
class SplitUse:
    """A split the session trains on, and the team's evaluations that use it."""

    domain: str
    split: str
    evaluations: list[Evaluation] = field(default_factory=list)


@dataclass(frozen=True)
class TrainingSummary:
    episodes: int
    finished: int
    scored: int
    running: int
    mean_reward: float | None
    curve: list[CurvePoint]
    by_task: list[TaskReward]
    per_minute: float | None  # episodes started per minute, first to last
    customer_tokens: int
    customer_cost: Decimal | None  # of the priced episodes; None: none priced
    unpriced: int  # finished episodes whose customer had no price
    warned: int  # episodes the split guard warned at their reset
    splits: list[SplitUse]
    recent: list[EpisodeRow]

    @property
    def guarded(self) -> list[SplitUse]:
        """The splits an evaluation of the team uses (the guard's warning)."""
        return [use for use in self.splits if use.evaluations]

    def chart(self) -> dict[str, list]:
        """The curve as the page's chart draws it (``static/js/training.js``)."""
        return {
            "episodes": [p.episode for p in self.curve],
            "rewards": [p.reward for p in self.curve],
            "averages": [round(p.average, 4) for p in self.curve],
            "runs": [p.run_id for p in self.curve],
            "window": MOVING_WINDOW,
        }


def training_summary(session: TrainingSession) -> TrainingSummary:
    """What ``session``'s page shows, from its episodes' runs (one read of them)."""
    episodes = list(
        TrainingEpisode.objects.filter(session=session)
        .select_related("run", "run__task")
        .only(
            "split",
            "domain",
            "warned",
            "created_at",
            "run__id",
            "run__status",
            "run__reward",
            "run__started_at",
            "run__created_at",
            "run__user_prompt_tokens",
            "run__user_completion_tokens",
            "run__user_cost_usd",
            "run__task__task_id",
        )
        .order_by("run_id")
    )
    curve: list[CurvePoint] = []
    tasks: dict[str, list[float]] = {}
    rows: list[EpisodeRow] = []
    tokens, cost, priced, unpriced, finished, running = 0, Decimal(0), 0, 0, 0, 0
    for number, episode in enumerate(episodes, start=1):
        run = episode.run
        task_id = run.task.task_id
        tokens += run.user_prompt_tokens + run.user_completion_tokens
        if run.is_final:
            finished += 1
            if run.user_cost_usd is not None:
                cost, priced = cost + run.user_cost_usd, priced + 1
            elif run.user_prompt_tokens or run.user_completion_tokens:
                unpriced += 1
        else:
            running += 1
        if run.reward is not None:
            window = [p.reward for p in curve[-(MOVING_WINDOW - 1) :]] + [run.reward]
            curve.append(
                CurvePoint(
                    episode=number,
                    run_id=run.pk,
                    task_id=task_id,
                    reward=run.reward,
                    average=sum(window) / len(window),
                )
            )
            tasks.setdefault(task_id, []).append(run.reward)
        rows.append(
            EpisodeRow(
                episode=number,
                run_id=run.pk,
                task_id=task_id,
                split=f"{episode.domain}/{episode.split}",
                status=run.status,
                reward=run.reward,
                warned=episode.warned,
                started=run.started_at or run.created_at,
            )
        )
    per_minute = None
    if len(rows) >= 2:
        span = (rows[-1].started - rows[0].started).total_seconds()
        per_minute = (len(rows) - 1) * 60 / span if span > 0 else None
    by_task = sorted(
        (TaskReward(task_id=t, episodes=len(r), mean=sum(r) / len(r)) for t, r in tasks.items()),
        key=lambda t: (_task_order(t.task_id), t.task_id),
    )
    splits = []
    for pair in session.splits:
        domain, _, split = pair.partition("/")
        splits.append(
            SplitUse(
                domain=domain,
                split=split,
                evaluations=evaluations_on_split(domain=domain, split=split),
            )
        )
    return TrainingSummary(
        episodes=len(rows),
        finished=finished,
        scored=len(curve),
        running=running,
        mean_reward=sum(p.reward for p in curve) / len(curve) if curve else None,
        curve=curve,
        by_task=by_task,
        per_minute=per_minute,
        customer_tokens=tokens,
        customer_cost=cost if priced else None,
        unpriced=unpriced,
        warned=sum(row.warned for row in rows),
        splits=splits,
        recent=rows[::-1][:EPISODES_SHOWN],
    )


def _task_order(task_id: str) -> tuple[int, int]:
    """Numeric task ids in number order, before the others."""
    return (0, int(task_id)) if task_id.isdigit() else (1, 0)
