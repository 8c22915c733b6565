"""Evaluations: one agent model against one customer model over a set of tasks × k trials."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse

from apps.connections.models import RunSides
from apps.runs.models import MAX_TRIALS, Run
from tau2_env.config import DEFAULT_MAX_STEPS


class Evaluation(RunSides):
    class Status(models.TextChoices):
        """Where an evaluation is. Allowed transitions (all in ``apps.evaluations.services``):

        RUNNING → PAUSED (pause: no new run starts; started ones finish) → RUNNING (resume);
        RUNNING or PAUSED → STOPPED (stop: runs not started are stopped, started ones are
        asked to stop); RUNNING → COMPLETED (every run is final) or FAILED (the provider
        refused the starter's token, 401/402: ``error`` says so; the rest is stopped).
        IMPORTED (a ``tau2 run`` results file) is final from the start; COMPLETED,
        STOPPED and FAILED are final too, but "retry the failed runs" moves any of them
        back to RUNNING when some run ended on an infrastructure or transient error.
        """

        RUNNING = "running", "running"
        PAUSED = "paused", "paused"
        COMPLETED = "completed", "completed"
        STOPPED = "stopped", "stopped"
        FAILED = "failed", "failed"
        IMPORTED = "imported", "imported"

    FINAL = (Status.COMPLETED, Status.STOPPED, Status.FAILED, Status.IMPORTED)

    name = models.CharField(max_length=200, blank=True)
    status = models.CharField(
        max_length=12, choices=Status.choices, default=Status.RUNNING, db_index=True
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="evaluations"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    domain = models.CharField(max_length=64, db_index=True)
    split = models.CharField(
        max_length=64, blank=True, help_text="The split the tasks come from ('' = a chosen list)."
    )
    full_split = models.BooleanField(
        default=False, help_text="The tasks are the whole split (leaderboard material)."
    )
    query = models.CharField(
        max_length=500, blank=True, help_text="The explorer search the tasks came from."
    )
    task_ids = models.JSONField(default=list, help_text="τ² task ids, in order.")

    agent_model = models.CharField(max_length=255, help_text="org/model[:provider|:policy]")
    agent_provider = models.CharField(max_length=64, blank=True)
    user_model = models.CharField(max_length=255)
    # Where each side runs, τ²'s llm_args of each side and the NL judge, as on each of
    # its runs: the fields of apps.connections.models.RunSides.
    # The ablation (apps.runs.models.Run.Mode): part of what the evaluation is; never
    # ranked or pooled with another mode.
    mode = models.CharField(max_length=16, choices=Run.Mode.choices, default=Run.Mode.DEFAULT)
    num_trials = models.PositiveSmallIntegerField(default=1)
    seed = models.BigIntegerField(default=300, help_text="As `tau2 run --seed`.")
    trial_seeds = models.JSONField(default=list, help_text="Each trial's seed, as τ² derives.")
    max_steps = models.PositiveIntegerField(default=DEFAULT_MAX_STEPS)
    max_errors = models.PositiveIntegerField(default=10)
    concurrency = models.PositiveSmallIntegerField(default=8)

    error = models.TextField(blank=True)
    provenance = models.JSONField(default=dict, help_text="τ² version, task set, prices, source.")
    summary = models.JSONField(
        default=dict, blank=True, help_text="Metrics when it last changed (lists, leaderboard)."
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(num_trials__gte=1) & Q(num_trials__lte=MAX_TRIALS),
                name="evaluation_trials_1_to_8",
            ),
            models.CheckConstraint(condition=Q(concurrency__gte=1), name="evaluation_concurrency"),
            models.CheckConstraint(
                condition=~Q(status="failed") | ~Q(error=""), name="evaluation_failure_has_a_reason"
            ),
        ]

    def __str__(self) -> str:
        named = self.name or f"Evaluation {self.pk} {self.domain} {self.agent_model}"
        # An ablation is part of what the evaluation is: named wherever it is.
        return named if self.mode == Run.Mode.DEFAULT else f"{named} ({self.get_mode_display()})"

    def get_absolute_url(self) -> str:
        return reverse("evaluations:detail", kwargs={"pk": self.pk})

    @property
    def is_final(self) -> bool:
        return self.status in self.FINAL

    @property
    def planned_runs(self) -> int:
        return len(self.task_ids) * self.num_trials
