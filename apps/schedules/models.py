"""An evaluation repeated on a schedule: each tick starts a new evaluation with the same
settings, as its owner."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse
from django_celery_beat.models import PeriodicTask

from apps.evaluations.models import Evaluation


class EvaluationSchedule(models.Model):
    """What to start (``spec``: the start request ``POST /api/evaluations/`` takes, the
    evaluation form's fields, copied from ``source`` when the schedule was made), when
    (``cron``, five fields; ``preset`` names it if it is one), and who starts it
    (``owner``: each repetition is theirs, with their connections, budgets and caps).

    Beat fires it through ``periodic_task`` (django-celery-beat's row, one-to-one; its task
    takes only this row's id). ``last_tick`` is the tick the latest repetition ran for:
    one UPDATE moves it forward, so a second message for the same tick (beat's catch-up,
    a retried delivery) starts nothing. ``enabled`` False: paused (beat's row too).
    ``last_error`` says, in words, why the latest tick started nothing ("" when it did).
    """

    class Preset(models.TextChoices):
        NIGHTLY = "nightly", "nightly"
        WEEKLY = "weekly", "weekly"
        CUSTOM = "custom", "cron"

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="evaluation_schedules"
    )
    source = models.ForeignKey(
        Evaluation,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="schedules",
        help_text="The evaluation whose settings it repeats (its spec is kept if deleted).",
    )
    spec = models.JSONField(help_text="The start request each repetition sends.")
    name = models.CharField(max_length=160)
    preset = models.CharField(max_length=8, choices=Preset.choices, default=Preset.NIGHTLY)
    cron = models.CharField(max_length=120, help_text="minute hour day-of-month month weekday")
    enabled = models.BooleanField(default=True)
    periodic_task = models.OneToOneField(
        PeriodicTask, on_delete=models.CASCADE, related_name="evaluation_schedule"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_tick = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_evaluation = models.ForeignKey(
        Evaluation, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=~Q(cron=""), name="schedule_has_a_cron"),
            models.CheckConstraint(condition=~Q(name=""), name="schedule_has_a_name"),
        ]

    def __str__(self) -> str:
        return f"Schedule {self.pk}: {self.name} ({self.cron})"

    def get_absolute_url(self) -> str:
        return reverse("schedules:detail", kwargs={"pk": self.pk})
