"""A live race: 2–4 agent models on one task, with one customer model and one seed.

Each lane is an ordinary model run (``apps.runs``); the race only records which runs
raced, in which lane, and the settings they share. The runs app knows nothing of races.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse

from apps.connections.models import connection_field
from tau2_env.config import DEFAULT_MAX_STEPS

MIN_LANES, MAX_LANES = 2, 4


class Race(models.Model):
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="races"
    )
    task = models.ForeignKey("tasks.Task", on_delete=models.PROTECT, related_name="races")
    user_model = models.CharField(max_length=255, help_text="The customer model of every lane.")
    user_connection = connection_field(
        help_text="Where the customer runs (empty: Hugging Face's router)."
    )
    seed = models.BigIntegerField(help_text="The seed every lane was given.")
    max_steps = models.PositiveIntegerField(default=DEFAULT_MAX_STEPS)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"Race {self.pk} {self.task}"

    def get_absolute_url(self) -> str:
        return reverse("races:detail", kwargs={"pk": self.pk})


class RaceLane(models.Model):
    race = models.ForeignKey(Race, on_delete=models.CASCADE, related_name="lanes")
    run = models.OneToOneField("runs.Run", on_delete=models.CASCADE, related_name="race_lane")
    position = models.PositiveSmallIntegerField(help_text="The lane, from 0, left to right.")

    class Meta:
        ordering = ["race", "position"]
        constraints = [
            models.UniqueConstraint(fields=["race", "position"], name="race_lane_position_unique")
        ]

    def __str__(self) -> str:
        return f"Race {self.race_id} lane {self.position + 1}: run {self.run_id}"
