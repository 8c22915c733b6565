"""Evaluations: one agent model against one customer model over a set of tasks × k trials."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse

from apps.connections.models import RunSides
from apps.runs.models import MAX_TRIALS, Run
from apps.runs.spec import RunSpec, spec_read
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
    # A knowledge domain's retrieval configuration (``tau2 run --retrieval-config``; "" for
    # a domain without retrieval). Part of what the conversation was played with.
    retrieval_config = models.CharField(max_length=64, blank=True, default="")
    num_trials = models.PositiveSmallIntegerField(default=1)
    seed = models.BigIntegerField(default=300, help_text="As `tau2 run --seed`.")
    trial_seeds = models.JSONField(default=list, help_text="Each trial's seed, as τ² derives.")
    max_steps = models.PositiveIntegerField(default=DEFAULT_MAX_STEPS)
    max_errors = models.PositiveIntegerField(default=10)
    # τ²'s wall-clock limit of each conversation in seconds (``tau2 run --timeout``; τ²
    # 1.x only), None as τ²'s default: no timeout.
    timeout = models.FloatField(null=True, blank=True)
    concurrency = models.PositiveSmallIntegerField(default=8)
    # Its agent is the team's own program, named by ``agent_model`` (e.g.
    # ``support-bot@2026-12-03``), which pulls its episodes over OpenEnv or MCP
    # (apps.evaluations.external); no model of a connection plays it.
    external_agent = models.BooleanField(default=False)

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

    @property
    def spec(self) -> RunSpec:
        """The settings every one of its runs is played with, as one object."""
        return spec_read(self, seed_field="seed")


class EvaluationJob(models.Model):
    """Heavy work a person asks of the evaluations pages, done on a worker, not in their
    web request: an import of a ``tau2 run`` results file (``IMPORT``: ``upload`` holds the
    file until the job ends; ``evaluation`` is what it made), or τ²'s own checks of a
    submission folder (``CHECK``: ``params`` holds the choice and the details; ``result``
    the checks' verdicts and output). Done by ``apps.evaluations.jobs``.

    Status: QUEUED → RUNNING (a worker claims it, once: one UPDATE) → DONE or FAILED
    (``error`` says why, in words). A job whose ``lease_expires_at`` passed lost its
    worker (RUNNING: a crash, ``kill -9``, a deploy; its lease is renewed while it works)
    or its message (QUEUED): the reaper (beat, and the job's page when looked at) sends
    it again, once for a lost worker; a second loss fails it. Only the claim that is
    current (``attempts``) may end it. DONE and FAILED are final, and the upload is gone.
    """

    class Kind(models.TextChoices):
        IMPORT = "import", "import"
        CHECK = "check", "submission check"
        REGRADE = "regrade", "re-grade"

    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    FINAL = (Status.DONE, Status.FAILED)

    kind = models.CharField(max_length=8, choices=Kind.choices)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.QUEUED)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="evaluation_jobs"
    )
    # An import's file (never a Celery argument): kept here, where every worker can read
    # it, until the job ends.
    upload = models.BinaryField(blank=True, default=b"", editable=False)
    size = models.PositiveBigIntegerField(default=0, help_text="The uploaded file's bytes.")
    filename = models.CharField(max_length=255, blank=True)
    name = models.CharField(max_length=200, blank=True, help_text="The evaluation's name.")
    params = models.JSONField(default=dict, blank=True, help_text="A check's choice and details.")
    evaluation = models.ForeignKey(
        Evaluation, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    result = models.JSONField(default=dict, blank=True, help_text="A check's verdicts.")
    error = models.TextField(blank=True)
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    attempts = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["created_by", "status"], name="evaluationjob_person")]
        constraints = [
            models.CheckConstraint(
                condition=~Q(status="failed") | ~Q(error=""),
                name="evaluationjob_failure_has_a_reason",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display().capitalize()} {self.pk} ({self.status})"

    def get_absolute_url(self) -> str:
        return reverse("evaluations:job", kwargs={"pk": self.pk})

    @property
    def is_final(self) -> bool:
        return self.status in self.FINAL


class StartRequest(models.Model):
    """An ``Idempotency-Key`` a person sent with ``POST /api/evaluations/`` and the
    evaluation it started: the same key again (a retried request) answers with that
    evaluation and starts nothing; with another body it is refused. Unique per person,
    so of two requests racing with one key exactly one inserts its row and starts; the
    other's whole transaction, its evaluation included, rolls back."""

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    key = models.CharField(max_length=255)
    # The request body's SHA-256 (its JSON, keys sorted): the key again with another body
    # is refused. Empty for requests stored before it was kept.
    body_sha256 = models.CharField(max_length=64, blank=True, default="")
    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["created_by", "key"], name="startrequest_once"),
            models.CheckConstraint(condition=~Q(key=""), name="startrequest_has_a_key"),
        ]

    def __str__(self) -> str:
        return f"Start request {self.key!r} → evaluation {self.evaluation_id}"


class Baseline(models.Model):
    """The evaluation the team judges later comparable ones against: one per identity
    (``identity_key``: the domain and everything ``apps.evaluations.pooling.Identity``
    says two evaluations must share to be ranked or pooled together — split, task set,
    τ² version, mode, customer, both sides' LLM arguments, limits). The server is one
    team's, so one baseline per identity on it. Pinning another evaluation of the same
    identity replaces it (``apps.evaluations.baselines.baseline_pin``); deleting the
    evaluation unpins it."""

    evaluation = models.OneToOneField(
        Evaluation, on_delete=models.CASCADE, related_name="baseline_pin"
    )
    domain = models.CharField(max_length=64, db_index=True)
    identity_key = models.CharField(max_length=64, help_text="sha256 of the domain and identity.")
    pinned_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    pinned_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["identity_key"], name="baseline_one_per_identity"),
        ]

    def __str__(self) -> str:
        return f"Baseline: evaluation {self.evaluation_id} ({self.domain})"
