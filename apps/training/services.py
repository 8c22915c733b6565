"""Writes of training sessions: the split guard asked before a named episode starts, and
each recorded episode put in its session (:data:`TRAINING_HOOKS`, registered with the
agents' recorder by ``TrainingConfig.ready``)."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.agents.hooks import EpisodeRefused
from apps.agents.hooks import TrainingEpisode as Named
from apps.agents.models import ApiKey
from apps.runs.models import Run
from apps.training.models import TrainingEpisode, TrainingSession
from apps.training.selectors import evaluations_using

__all__ = ["TRAINING_HOOKS", "training_episode_record", "training_guard"]

logger = logging.getLogger(__name__)

SEED_ADVICE = "train on `train`, evaluate on `test`, so training does not leak into the benchmark"


def _evaluations_said(found: list) -> str:
    """What the guard names: "the team's evaluation #4 (split 'test')", or "3 of the
    team's evaluations (#4 on 'test', #7 on 'base', #9 on 'test')"."""
    if len(found) == 1:
        return f"the team's evaluation #{found[0].pk} (split {found[0].split!r})"
    shown = ", ".join(f"#{e.pk} on {e.split!r}" for e in found[:5])
    return f"{len(found)} of the team's evaluations ({shown}{', …' if len(found) > 5 else ''})"


def training_guard(*, episode: Named) -> str | None:
    """``TAU2_TRAINING_SPLIT_GUARD`` on ``episode``: ``None`` when no evaluation of the
    team uses its split or a split holding its task; else, with "warn", the one line
    added to its opening (the page says so too), and with "refuse", raises
    :class:`~apps.agents.hooks.EpisodeRefused` saying why."""
    found = evaluations_using(domain=episode.domain, split=episode.split, task_id=episode.task_id)
    if not found:
        return None
    what = f"{episode.domain} task {episode.task_id} (split {episode.split!r})"
    used_by = _evaluations_said(found)
    if settings.TAU2_TRAINING_SPLIT_GUARD == "refuse":
        raise EpisodeRefused(
            f"Training session {episode.session!r} may not train on {what}: {used_by} "
            f"evaluates on it, and this server refuses training on an evaluated split "
            f"(TAU2_TRAINING_SPLIT_GUARD=refuse). As τ²-bench says, {SEED_ADVICE}: reset "
            f"with a split no evaluation uses (e.g. split='train')."
        )
    return (
        f"[tau2 training] Warning: training session {episode.session!r} plays {what}, "
        f"which {used_by} evaluates on: {SEED_ADVICE}."
    )


def training_episode_record(*, episode: Named, run: Run) -> TrainingEpisode | None:
    """Put ``run`` (the recorded episode) in its key's training session named
    ``episode.session``, made at its first episode; notes the split and the last
    episode's time. ``None`` when the key is gone."""
    key = ApiKey.objects.filter(key_id=episode.key_id, user_id=episode.user_id).first()
    if key is None:
        logger.warning("Training episode of run %s not recorded: its key is gone", run.pk)
        return None
    now = timezone.now()
    session, _ = TrainingSession.objects.get_or_create(
        key=key, name=episode.session, defaults={"owner_id": key.user_id, "created_at": now}
    )
    split = f"{episode.domain}/{episode.split}"
    with transaction.atomic():
        # One row lock: episodes of one session land from many threads at once.
        session = TrainingSession.objects.select_for_update().get(pk=session.pk)
        if split not in session.splits:
            session.splits = [*session.splits, split]
        session.last_episode_at = now
        session.save(update_fields=["splits", "last_episode_at"])
        return TrainingEpisode.objects.create(
            session=session,
            run=run,
            domain=episode.domain,
            split=episode.split,
            warned=bool(episode.warning),
            created_at=now,
        )


class _TrainingHooks:
    """The agents' training hooks (:class:`apps.agents.hooks.TrainingHooks`)."""

    def admit(self, *, episode: Named) -> str | None:
        return training_guard(episode=episode)

    def recorded(self, *, episode: Named, run: Run) -> None:
        training_episode_record(episode=episode, run=run)


TRAINING_HOOKS = _TrainingHooks()
