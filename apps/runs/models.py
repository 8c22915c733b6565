"""Runs: one conversation over one τ²-bench task, by a model or by a person, kept for the team."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.urls import reverse

from apps.connections.models import RunSides
from apps.runs.spec import RunSpec, spec_read
from tau2_env.config import DEFAULT_MAX_ERRORS, DEFAULT_MAX_STEPS

# Trials of one task in an evaluation (``Run.trial`` is 0 … MAX_TRIALS - 1).
MAX_TRIALS = 8


class Run(RunSides):
    class Kind(models.TextChoices):
        MODEL = "model", "model"
        HUMAN = "human", "human"
        # An outside agent's episode over the OpenEnv or MCP face, opened with a studio
        # API key (apps.agents.recording records it; the reaper only stops a lost one).
        AGENT = "agent", "agent via API"

    class Status(models.TextChoices):
        """Where a run is. Allowed transitions:

        QUEUED → RUNNING (a worker claims it) or STOPPED (stopped before it started);
        RUNNING → RUNNING (another worker takes over once the lease expired: a
        :class:`Resumption` "worker lost"), QUEUED (the worker lost its database or
        broker and handed it back: "database restart" or "broker restart"; it resumes
        from its stored messages), COMPLETED (the conversation ended and τ² scored it),
        FAILED (a provider or system error; ``error`` says why, ``failure`` what kind)
        or STOPPED (someone pressed Stop). FAILED → QUEUED only through "retry the
        failed runs" of an evaluation, for the failures in :attr:`Run.RETRYABLE`.
        A play session (kind ``human``) is created RUNNING and stays so while the
        person plays; where it is in between is its :class:`PlayPhase`. An agent's
        episode (kind ``agent``) is created RUNNING and ends COMPLETED (scored), FAILED
        (the customer or the scoring failed) or STOPPED (abandoned: closed idle,
        disconnected, replaced). The reaper re-queues only model runs; it stops an
        agent run whose lease (renewed at each hop) ran out.
        COMPLETED, FAILED and STOPPED are final.
        """

        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        COMPLETED = "completed", "completed"
        FAILED = "failed", "failed"
        STOPPED = "stopped", "stopped"

    FINAL = (Status.COMPLETED, Status.FAILED, Status.STOPPED)

    class Failure(models.TextChoices):
        """Why a failed run failed: only ``transient``, ``infrastructure`` and ``budget``
        failures are worth trying again (:attr:`Run.RETRYABLE`: "retry the failed runs"
        re-queues those, never the others). ``budget``: a connection's (or its person's)
        monthly budget had no room for the run when it was to start, or was reached
        between two of its hops (``apps.runs.budgets``); its messages are kept."""

        PROVIDER = "provider", "the provider refused (401/402/403/404)"
        TRANSIENT = "transient", "rate limit, provider error or timeout, after retries"
        INFRASTRUCTURE = "infrastructure", "database, broker or worker trouble"
        CONVERSATION = "conversation", "the conversation or its scoring went wrong"
        BUDGET = "budget", "a connection's monthly budget was reached"

    RETRYABLE = frozenset({Failure.TRANSIENT, Failure.INFRASTRUCTURE, Failure.BUDGET})

    class Resumption(models.TextChoices):
        """Why a started model run was taken up again (``Run.resumptions``, one per time,
        in order). A lost worker counts against ``TAU2_RUN_MAX_ATTEMPTS`` (its lease ran
        out and another worker took the run over: a crash, ``kill -9``, a deploy, or the
        run bringing its worker down); a hand-back does not (the worker gave the run back
        itself because PostgreSQL or Redis went away: the platform's trouble, not the
        run's)."""

        WORKER_LOST = "worker_lost", "worker lost"
        # An outside agent's episode of an evaluation its client left unfinished
        # (disconnected, closed, its lease ran out): back in the queue, played again.
        AGENT_GONE = "agent_gone", "agent left"
        DATABASE = "database", "database restart"
        BROKER = "broker", "broker restart"

    HANDED_BACK = frozenset({Resumption.DATABASE, Resumption.BROKER})

    class Mode(models.TextChoices):
        """How τ² runs the episode (the paper's ablations): ``default`` (τ²'s LLMAgent and
        its user simulator, ``tau2 run``), ``no_user`` (τ²'s LLMSoloAgent with the DummyUser:
        the agent gets the ticket and works alone, ``--agent llm_agent_solo --user
        dummy_user``; only on domains whose tasks carry a ticket) and ``oracle_plan``
        (τ²'s LLMGTAgent, given the task's expected actions, ``--agent llm_agent_gt``)."""

        DEFAULT = "default", "default"
        NO_USER = "no_user", "No-User"
        ORACLE_PLAN = "oracle_plan", "Oracle plan"

    class PlayPhase(models.TextChoices):
        """Where a play session is; empty for model runs. Allowed transitions (all in
        ``apps.play.services``):

        CUSTOMER → YOUR_TURN (the customer answered), NEEDS_CUSTOMER (their turn failed:
        the player asks again → CUSTOMER) or NEEDS_SCORING (the customer ended it, or
        τ²'s limits; scoring failed) or ENDED (the customer ended it and it was scored);
        YOUR_TURN → CUSTOMER (the player said something), TOOL (a tool call) or SCORING
        (the player ends it); TOOL → YOUR_TURN, or SCORING (τ²'s limits were reached);
        SCORING → ENDED (scored) or NEEDS_SCORING (scoring failed: ending again →
        SCORING). Any phase → ENDED when the session is stopped. While CUSTOMER, TOOL
        or SCORING, ``lease_expires_at`` says until when the work may take; after it the
        player may ask again (a lost CUSTOMER reads as NEEDS_CUSTOMER, a lost SCORING
        as NEEDS_SCORING, a lost TOOL as YOUR_TURN).
        """

        YOUR_TURN = "your_turn", "waiting for the player"
        CUSTOMER = "customer", "the customer is answering"
        TOOL = "tool", "a tool call is running"
        SCORING = "scoring", "being scored"
        NEEDS_CUSTOMER = "needs_customer", "the customer's turn failed"
        NEEDS_SCORING = "needs_scoring", "ended, not scored yet"
        ENDED = "ended", "ended"

    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.MODEL)
    status = models.CharField(
        max_length=12, choices=Status.choices, default=Status.QUEUED, db_index=True
    )
    task = models.ForeignKey("tasks.Task", on_delete=models.PROTECT, related_name="runs")
    domain = models.CharField(max_length=64, db_index=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="runs"
    )

    agent_model = models.CharField(max_length=255, help_text="org/model[:provider|:policy]")
    agent_provider = models.CharField(max_length=64, blank=True)
    user_model = models.CharField(max_length=255)
    user_provider = models.CharField(max_length=32, default="hf")
    # Where each side runs and τ²'s llm_args of each side, the NL judge and the
    # embeddings: the fields of apps.connections.models.RunSides.
    # The ablation the episode runs in (Run.Mode); its evaluation's mode.
    mode = models.CharField(max_length=16, choices=Mode.choices, default=Mode.DEFAULT)
    # A knowledge domain's retrieval configuration (``tau2 run --retrieval-config``; "" for
    # a domain without retrieval). Part of what the conversation was played with.
    retrieval_config = models.CharField(max_length=64, blank=True, default="")
    max_steps = models.PositiveIntegerField(default=DEFAULT_MAX_STEPS)
    # τ²'s own limit of tool errors (``tau2 run --max-errors``), its default τ²'s.
    max_errors = models.PositiveIntegerField(default=DEFAULT_MAX_ERRORS)
    # τ²'s wall-clock limit of one conversation in seconds (``tau2 run --timeout``; τ² 1.x
    # only), None as τ²'s default: no timeout.
    timeout = models.FloatField(null=True, blank=True)
    seed = models.BigIntegerField(
        null=True, blank=True, help_text="The seed the orchestrator got (the trial's)."
    )
    given_seed = models.BigIntegerField(
        null=True, blank=True, help_text="The seed given, as to `tau2 run --seed`."
    )
    seed_trial = models.PositiveSmallIntegerField(
        default=0, help_text="Which trial of the given seed ``seed`` is (as tau2 run derives it)."
    )
    # Prices in USD per 1M input / output tokens, fixed when the run starts (the agent's)
    # or at the customer's first message (looked up once: ``user_prices_fixed``); empty
    # when unpriced (the router picks the provider), never $0.
    agent_price_input = models.DecimalField(max_digits=14, decimal_places=8, null=True, blank=True)
    agent_price_output = models.DecimalField(max_digits=14, decimal_places=8, null=True, blank=True)
    user_price_input = models.DecimalField(max_digits=14, decimal_places=8, null=True, blank=True)
    user_price_output = models.DecimalField(max_digits=14, decimal_places=8, null=True, blank=True)
    user_prices_fixed = models.BooleanField(default=False)

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    evaluation = models.ForeignKey(
        "evaluations.Evaluation",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="runs",
    )
    trial = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Trial number within its evaluation (from 0)."
    )
    dispatched_at = models.DateTimeField(
        null=True, blank=True, help_text="When it was handed to the workers' queue."
    )
    failure = models.CharField(
        max_length=16, choices=Failure.choices, blank=True, help_text="Why it failed, if it did."
    )

    stop_requested = models.BooleanField(default=False)
    play_phase = models.CharField(
        max_length=16, choices=PlayPhase.choices, blank=True, help_text="Play sessions only."
    )
    worker = models.CharField(
        max_length=255, blank=True, help_text="The worker (or web request) holding the run now."
    )
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(
        default=0, help_text="Claims by a worker, re-claims after a hand-back included."
    )
    resumptions = models.JSONField(
        default=list,
        blank=True,
        help_text="Why it was taken up again after it started, in order (Run.Resumption).",
    )

    termination_reason = models.CharField(max_length=32, blank=True)
    loop_length = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=(
            "How many of the last messages repeat (apps.runs.endings.loop_length; 0: no "
            "loop), stored as the run ends; empty while it goes. A mark, not τ²'s."
        ),
    )
    error = models.TextField(blank=True)
    reward = models.FloatField(null=True, blank=True, db_index=True)
    reward_info = models.JSONField(null=True, blank=True)

    n_messages = models.PositiveIntegerField(default=0)
    n_tool_calls = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="The agent's calls (τ²'s agent_cost); empty when unpriced.",
    )
    # The simulated customer's calls (τ²'s user_cost), on the same person's token.
    user_prompt_tokens = models.PositiveBigIntegerField(default=0)
    user_completion_tokens = models.PositiveBigIntegerField(default=0)
    user_cost_usd = models.DecimalField(
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="The customer's calls; empty when unpriced.",
    )
    # τ²'s NL-assertion judge's calls (tau2_env.llm.gateway's meter, role "judge"), priced at the
    # judge's route: ``judge_model`` on its connection, else the customer's prices.
    judge_prompt_tokens = models.PositiveBigIntegerField(default=0)
    judge_completion_tokens = models.PositiveBigIntegerField(default=0)
    judge_cost_usd = models.DecimalField(
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="The NL judge's calls; empty when unpriced or not judged.",
    )
    # When the judge's calls were made, if not during the run: a re-grade judges stored
    # conversations long after they started, and a budget charges the month it judged in.
    judged_at = models.DateTimeField(null=True, blank=True)
    # A knowledge domain's embeddings (tau2_env.llm.embeddings, role "embedder"): its
    # documents (once per connection model: later runs read them from the cache) and the
    # agent's searches, priced at ``embedding_model``'s input price on its connection.
    embedding_prompt_tokens = models.PositiveBigIntegerField(default=0)
    embedding_cost_usd = models.DecimalField(
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="The embeddings' calls; empty when unpriced or none.",
    )
    # What admission to a budgeted connection held for each side while the run goes on
    # (apps.runs.budgets: one run's estimated maximum); empty: not admitted to a budget.
    agent_reserved_usd = models.DecimalField(
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="Held on the agent's budgeted connection while the run goes on.",
    )
    user_reserved_usd = models.DecimalField(
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="Held on the customer's budgeted connection while the run goes on.",
    )
    provenance = models.JSONField(default=dict, help_text="τ² version, task set, models, args.")
    # A fork (apps.runs.forks) continues its parent's conversation: its messages before
    # ``fork_seq`` are the parent's, replayed onto a fresh environment; from it on, its own.
    parent = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="forks"
    )
    fork_seq = models.PositiveIntegerField(
        null=True, blank=True, help_text="The parent's message this fork replaced (forks only)."
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(parent__isnull=True) | Q(fork_seq__isnull=False),
                name="run_fork_has_a_fork_point",
            ),
            models.CheckConstraint(
                condition=Q(reward__isnull=True) | Q(reward__gte=0, reward__lte=1),
                name="run_reward_in_unit_interval",
            ),
            models.UniqueConstraint(
                fields=["evaluation", "task", "trial"],
                condition=Q(evaluation__isnull=False),
                name="run_one_per_evaluation_task_trial",
            ),
            models.CheckConstraint(
                condition=~Q(status="failed") | ~Q(error=""), name="run_failure_has_a_reason"
            ),
        ]

    def __str__(self) -> str:
        return f"Run {self.pk} {self.domain}/{self.task.task_id if self.task_id else '?'}"

    def get_absolute_url(self) -> str:
        return reverse("runs:detail", kwargs={"pk": self.pk})

    @property
    def spec(self) -> RunSpec:
        """The settings it was played with, as one object (``seed``: the one given)."""
        return spec_read(self, seed_field="given_seed")

    @property
    def agent_value(self) -> str:
        """The agent model as pickers and APIs name it: ``org/model[:…]`` on the router,
        ``@connection/model`` on a connection."""
        return _side_value(self.agent_connection, self.agent_model)

    @property
    def user_value(self) -> str:
        """The customer model as pickers and APIs name it (see :attr:`agent_value`)."""
        return _side_value(self.user_connection, self.user_model)

    @property
    def agent_prices(self) -> tuple[Decimal, Decimal] | None:
        """The agent model's (input, output) price per 1M tokens, or ``None`` if unpriced."""
        if self.agent_price_input is None or self.agent_price_output is None:
            return None
        return self.agent_price_input, self.agent_price_output

    @property
    def user_prices(self) -> tuple[Decimal, Decimal] | None:
        """The customer model's (input, output) price per 1M tokens, or ``None``."""
        if self.user_price_input is None or self.user_price_output is None:
            return None
        return self.user_price_input, self.user_price_output

    @property
    def attempts_counted(self) -> int:
        """The claims that count against ``TAU2_RUN_MAX_ATTEMPTS``: all but those that
        followed a hand-back after a database or broker restart."""
        return self.attempts - sum(1 for reason in self.resumptions if reason in self.HANDED_BACK)

    @property
    def resumption_labels(self) -> list[str]:
        """``resumptions`` as people read them ("worker lost", "database restart")."""
        labels = dict(self.Resumption.choices)
        return [labels.get(reason, reason) for reason in self.resumptions]

    @property
    def is_final(self) -> bool:
        return self.status in self.FINAL

    @property
    def elapsed_seconds(self) -> float | None:
        if not self.started_at:
            return None
        from django.utils import timezone

        end = self.finished_at or timezone.now()
        return (end - self.started_at).total_seconds()


def _side_value(connection, model: str) -> str:
    return f"@{connection.slug}/{model}" if connection is not None else model


class RunEvent(models.Model):
    """One τ² message of a run's conversation, in order (``seq`` from 0, no gaps)."""

    class Kind(models.TextChoices):
        CUSTOMER = "customer", "customer"
        AGENT = "agent", "agent"
        TOOL_RESULT = "tool_result", "tool result"
        CUSTOMER_TOOL_RESULT = "customer_tool_result", "customer's phone result"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=24, choices=Kind.choices)
    message = models.JSONField(help_text="τ²'s message, model_dump(mode='json').")
    # The model's time for this message: the whole call's, from its first attempt to the
    # answer (failed attempts and the waits between them included); set on the message
    # the model produced. ``attempts``: each LLM attempt behind it, in order (role,
    # outcome, seconds, said), when it took more than one; null for one attempt and for
    # runs stored before attempts were kept. τ²'s own message fields stay in ``message``.
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    attempts = models.JSONField(null=True, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="run_event_seq_unique")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.kind}"


class ReviewLabel(models.Model):
    """A reviewer's verdict on a run, or on one of its events (``event`` set).

    An event must belong to the label's own run. A ``CheckConstraint`` cannot span two
    tables, so this is held in three places: :meth:`clean` (model forms and the admin),
    ``apps.runs.review.label_create`` (which calls ``full_clean``) and, on PostgreSQL,
    a composite foreign key ``(run_id, event_id) → runevent (run_id, id)`` added by
    migration 0004 (SQLite, the laptop default, keeps the first two only).
    """

    class Category(models.TextChoices):
        AGENT_ERROR = "agent_error", "agent error"
        USER_SIM_ERROR = "user_sim_error", "user-simulator error"
        TASK_BUG = "task_bug", "task bug"
        GRADER_BUG = "grader_bug", "grader bug"
        # Reviewed and found right: without it a run that is fine could never leave the
        # review queue.
        NO_ISSUE = "no_issue", "no issue"

    class Severity(models.TextChoices):
        # τ²'s review says "critical" and "minor"; a minor finding is stored as benign.
        CRITICAL = "critical", "critical"
        BENIGN = "benign", "benign"

    class Origin(models.TextChoices):
        HUMAN = "human", "a person"
        AUTO = "auto", "auto-review"

    class Status(models.TextChoices):
        """Whether a label counts. A person's is ACCEPTED. An auto-review finding is
        PENDING until a person ACCEPTS or DISMISSES it (or edits it: then it is theirs,
        origin human, accepted). Only accepted labels count in metrics and flags."""

        PENDING = "pending", "pending"
        ACCEPTED = "accepted", "accepted"
        DISMISSED = "dismissed", "dismissed"

    class Source(models.TextChoices):
        """Who made the error (τ²'s review: ``agent`` / ``user``)."""

        AGENT = "agent", "agent"
        USER = "user", "user simulator"

    class Kind(models.TextChoices):
        """What went wrong, in τ²'s review's tags."""

        HALLUCINATION = "hallucination", "hallucination"
        GUIDELINE_VIOLATION = "guideline_violation", "policy violation"
        TOOL_CALL_ARGUMENT_ERROR = "tool_call_argument_error", "wrong tool arguments"
        PREMATURE_TERMINATION = "premature_termination", "premature end"
        MISSED_REQUIRED_ACTION = "missed_required_action", "missed required action"
        WRONG_SEQUENCE = "wrong_sequence", "wrong order"
        USER_DEVIATION = "user_instruction_deviation", "simulator deviated from its scenario"
        OTHER = "other", "other"
        # τ² 1.x's reviewer's further tags.
        INCORRECT_INTERPRETATION = "incorrect_interpretation", "misread information"
        REVEALED_INFO_EARLY = "revealed_info_early", "revealed information early"
        INCONSISTENT_BEHAVIOR = "inconsistent_behavior", "inconsistent behaviour"
        TOOL_CALL_SCHEMA_ERROR = "tool_call_schema_error", "wrong tool name or argument types"
        IRRELEVANT_TOOL_CALL = "irrelevant_tool_call", "irrelevant tool call"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="labels")
    event = models.ForeignKey(
        RunEvent, on_delete=models.CASCADE, null=True, blank=True, related_name="labels"
    )
    category = models.CharField(max_length=24, choices=Category.choices)
    severity = models.CharField(max_length=12, choices=Severity.choices)
    note = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    origin = models.CharField(max_length=8, choices=Origin.choices, default=Origin.HUMAN)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.ACCEPTED)
    source = models.CharField(max_length=8, choices=Source.choices, blank=True)
    kind = models.CharField(max_length=32, choices=Kind.choices, blank=True)
    justification = models.TextField(blank=True)
    # The auto-review that found it (kept when a person edits it: where it came from).
    auto_review = models.ForeignKey(
        "runs.AutoReview",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="findings",
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)

    # The labels that count (metrics, flags, the queue): a person's, or an accepted finding.
    COUNTED = Q(status="accepted")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["run", "severity"], name="reviewlabel_run_severity")]
        constraints = [
            models.CheckConstraint(
                condition=~Q(category="no_issue", severity="critical"),
                name="reviewlabel_no_issue_is_not_critical",
            ),
            models.CheckConstraint(
                condition=Q(origin="auto") | Q(status="accepted"),
                name="reviewlabel_a_persons_label_is_accepted",
            ),
            models.CheckConstraint(
                condition=Q(origin="human") | Q(auto_review__isnull=False),
                name="reviewlabel_auto_has_its_review",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_category_display()} ({self.severity}) on run {self.run_id}"

    def clean(self) -> None:
        """Refuse an event of another run, and a critical "no issue"."""
        errors = {}
        event_run = self.event.run_id if self.event_id is not None else None
        if event_run is not None and self.run_id is not None and event_run != self.run_id:
            errors["event"] = (
                f"Message {self.event.run_id}#{self.event.seq} belongs to run "
                f"{self.event.run_id}, not to run {self.run_id}."
            )
        if self.category == self.Category.NO_ISSUE and self.severity == self.Severity.CRITICAL:
            errors["severity"] = "A run or message with no issue cannot be critical."
        if errors:
            raise ValidationError(errors)


class ReviewerAsked(models.Model):
    """Who asked which reviewer model, on which connection (``None``: the router, on
    ``requested_by``'s token), at the model's prices fixed when asked (``None``: unpriced):
    an auto-review's, and a standing review's for the reviews it queues."""

    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    reviewer_model = models.CharField(max_length=255)
    reviewer_connection = models.ForeignKey(
        "connections.Connection",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
    )
    price_input = models.DecimalField(max_digits=14, decimal_places=8, null=True, blank=True)
    price_output = models.DecimalField(max_digits=14, decimal_places=8, null=True, blank=True)

    class Meta:
        abstract = True

    @property
    def prices(self) -> tuple[Decimal, Decimal] | None:
        if self.price_input is None or self.price_output is None:
            return None
        return self.price_input, self.price_output


class StandingReview(ReviewerAsked):
    """Each run of ``evaluation`` reviewed as it ends (``tau2 run --auto-review``): staff
    ask once, for the runs already ended and every later one, by ``reviewer_model`` (on
    ``reviewer_connection``, else the router on ``requested_by``'s token) in ``mode``, at
    the prices fixed when asked. Stopping it leaves the reviews made."""

    evaluation = models.OneToOneField(
        "evaluations.Evaluation", on_delete=models.CASCADE, related_name="standing_review"
    )
    mode = models.CharField(max_length=4, default="full")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"Each run of evaluation {self.evaluation_id} reviewed by {self.reviewer_model}"


class AutoReview(ReviewerAsked):
    """An LLM's review of one run (τ²'s ``tau2 review``): its findings are the run's
    review labels of origin ``auto`` (``findings``), pending until a person decides.

    Status: QUEUED → RUNNING (the worker claims it) → DONE (findings stored, all at once)
    or FAILED (``error`` says why, in words; nothing stored); RUNNING → QUEUED when its
    worker was lost (``autoreviews_reap``, once; a second loss fails it). Only the claim
    that is current (``attempts``) may store its findings. The reviewer runs on
    ``requested_by``'s credentials and rules; its tokens and cost are metered here, at the
    reviewer model's prices fixed when it was asked (``None``: unpriced, never $0).
    """

    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "reviewing"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    class Mode(models.TextChoices):
        FULL = "full", "the agent and the customer"
        USER = "user", "the simulated customer only"

    class Reviewer(models.TextChoices):
        TAU2 = "tau2", "τ²'s reviewer"
        STUDIO = "studio", "the studio's reviewer"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="auto_reviews")
    # What it reads (``tau2 review --mode``): both sides, or the simulated customer only
    # (τ² 1.x's reviewer; the studio's own on τ² 0.2 reads both).
    mode = models.CharField(max_length=4, choices=Mode.choices, default=Mode.FULL)
    # Whose reviewer: τ² 1.x's own (``tau2 review``), or the studio's (τ² 0.2 has none).
    reviewer = models.CharField(max_length=8, choices=Reviewer.choices, blank=True)
    # Queued by a standing review (its sweep, or as the run ended): one per run, reviewer
    # model and requester, however the two race.
    standing = models.BooleanField(default=False)
    # τ² 1.x's full review classifies the customer's authentication too: ``status``
    # (succeeded, failed, not_needed) and ``reasoning``.
    authentication = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.QUEUED)
    # Claims by a worker: a review still "reviewing" TAU2_AUTOREVIEW_LEASE_SECONDS after
    # its claim lost its worker; the reaper queues it again once, then fails it.
    started_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True)
    summary = models.TextField(blank=True)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=~Q(status="failed") | ~Q(error=""),
                name="autoreview_failure_has_a_reason",
            ),
            models.UniqueConstraint(
                fields=["run", "requested_by", "reviewer_model"],
                condition=Q(standing=True),
                name="autoreview_one_standing_per_run",
                violation_error_message="This standing review has queued this run already.",
            ),
        ]

    def __str__(self) -> str:
        return f"Auto-review {self.pk} of run {self.run_id} ({self.status})"
