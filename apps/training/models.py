"""Training sessions: the episodes a studio key plays under one session name.

An outside trainer (TRL's GRPO, say) names its run with ``X-Tau2-Training-Session``,
``?training_session=`` or OpenEnv's ``reset(training_session=…)``; each episode is an
ordinary agent run (``apps.agents.recording``), and the session only records which runs
it holds and on which split. The runs app knows nothing of training.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone


class TrainingSession(models.Model):
    """The episodes of one studio key under one name (unique per key). ``splits``: the
    splits its episodes were drawn from, in the order first seen ("domain/split")."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="training_sessions"
    )
    key = models.ForeignKey(
        "agents.ApiKey", on_delete=models.CASCADE, related_name="training_sessions"
    )
    name = models.CharField(max_length=100)
    splits = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    last_episode_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-last_episode_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["key", "name"], name="training_session_key_name"),
            models.CheckConstraint(condition=~models.Q(name=""), name="training_session_named"),
        ]

    def __str__(self) -> str:
        return f"Training session {self.name!r} of {self.owner}"

    def get_absolute_url(self) -> str:
        return reverse("training:detail", kwargs={"pk": self.pk})


class TrainingEpisode(models.Model):
    """One episode of a training session: its agent run, and the split it was drawn
    from; ``warned``: the split guard warned at its reset (an evaluation uses it)."""

    session = models.ForeignKey(TrainingSession, on_delete=models.CASCADE, related_name="episodes")
    run = models.OneToOneField(
        "runs.Run", on_delete=models.CASCADE, related_name="training_episode"
    )
    domain = models.CharField(max_length=64)
    split = models.CharField(max_length=64)
    warned = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["session", "run_id"]

    def __str__(self) -> str:
        return f"{self.session} episode: run {self.run_id}"
