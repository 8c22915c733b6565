"""Connections: where else than Hugging Face's router a model may run.

A :class:`Connection` is one provider account or endpoint — OpenAI, Anthropic, Google
Gemini, Mistral, OpenRouter, Together, Fireworks, or any OpenAI-compatible server (vLLM,
TGI, SGLang, Ollama, LM Studio, an HF Inference Endpoint) — with its key, sealed in the
token vault (``apps.accounts.crypto``) and opened only by ``apps.connections.llm_routes``.
A team connection (no ``owner``) is used by whom staff allow; a personal one only by its
owner. A connection is never deleted while runs name it: deleting it wipes its key and
marks it deleted, so history keeps saying where its runs ran.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from apps.accounts import crypto

PRICE = {"max_digits": 14, "decimal_places": 8, "null": True, "blank": True}
BUDGET = {"max_digits": 12, "decimal_places": 2, "null": True, "blank": True}


class Connection(models.Model):
    class Kind(models.TextChoices):
        OPENAI = "openai", "OpenAI"
        ANTHROPIC = "anthropic", "Anthropic"
        GEMINI = "gemini", "Google Gemini"
        MISTRAL = "mistral", "Mistral"
        OPENROUTER = "openrouter", "OpenRouter"
        TOGETHER = "together", "Together AI"
        FIREWORKS = "fireworks", "Fireworks AI"
        OPENAI_COMPATIBLE = "openai_compatible", "OpenAI-compatible endpoint"

    class Access(models.TextChoices):
        """Who may use a team connection (a personal one: its owner only)."""

        EVERYONE = "everyone", "everyone signed in"
        STAFF = "staff", "staff only"
        NAMED = "named", "the people named"

    name = models.CharField(max_length=80)
    slug = models.SlugField(
        max_length=40,
        unique=True,
        help_text="Names its models in pickers and APIs: @<slug>/<model>.",
    )
    kind = models.CharField(max_length=24, choices=Kind.choices)
    base_url = models.URLField(
        max_length=500, blank=True, help_text="Empty: the provider's own API."
    )
    api_key_enc = models.TextField(blank=True, help_text="Fernet ciphertext; never shown.")
    key_hint = models.CharField(
        max_length=12, blank=True, help_text="The key's last four characters, e.g. …a1b2."
    )
    headers_enc = models.TextField(
        blank=True, help_text="Extra headers as sealed JSON (they may carry secrets)."
    )
    header_names = models.JSONField(default=list, blank=True)

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="personal_connections",
        help_text="Empty: a team connection.",
    )
    access = models.CharField(max_length=12, choices=Access.choices, default=Access.EVERYONE)
    allowed_users = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="allowed_connections"
    )
    monthly_budget_usd = models.DecimalField(
        **BUDGET, help_text="USD per calendar month (UTC) for everyone together; empty: none."
    )
    person_monthly_budget_usd = models.DecimalField(
        **BUDGET, help_text="USD per calendar month (UTC) for each person; empty: none."
    )
    max_in_flight = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Runs calling it at once (τ²'s --provider-limit)."
    )

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    key_rotated_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    last_test = models.JSONField(
        default=dict, blank=True, help_text="The last Test: ok, kind, message, at."
    )

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(max_in_flight__isnull=True) | Q(max_in_flight__gte=1),
                name="connection_in_flight_at_least_one",
            ),
            models.CheckConstraint(
                condition=Q(monthly_budget_usd__isnull=True) | Q(monthly_budget_usd__gte=0),
                name="connection_budget_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(person_monthly_budget_usd__isnull=True)
                | Q(person_monthly_budget_usd__gte=0),
                name="connection_person_budget_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<Connection {self.slug} {self.kind}>"

    @property
    def is_team(self) -> bool:
        return self.owner_id is None

    @property
    def is_deleted(self) -> bool:
        return self.deleted_at is not None

    @property
    def where_label(self) -> str:
        """``Team OpenAI (OpenAI)``, ``my vLLM (OpenAI-compatible endpoint)``."""
        return f"{self.name} ({self.get_kind_display()})"

    @property
    def budgeted(self) -> bool:
        return self.monthly_budget_usd is not None or self.person_monthly_budget_usd is not None


class ConnectionModel(models.Model):
    """A model a connection offers, as its provider names it, with prices per 1M tokens.

    Prices come from litellm's cost map when it knows the model (``price_source``
    ``litellm``), else staff enter them (``entered``); both empty: unpriced, never $0.
    """

    class PriceSource(models.TextChoices):
        LITELLM = "litellm", "litellm's price list"
        ENTERED = "entered", "entered by staff"
        NONE = "", "unpriced"

    connection = models.ForeignKey(Connection, on_delete=models.CASCADE, related_name="models")
    name = models.CharField(max_length=200)
    input_price = models.DecimalField(**PRICE, help_text="USD per 1M input tokens.")
    output_price = models.DecimalField(**PRICE, help_text="USD per 1M output tokens.")
    price_source = models.CharField(
        max_length=8, choices=PriceSource.choices, blank=True, default=PriceSource.NONE
    )

    class Meta:
        ordering = ["connection", "name"]
        constraints = [
            models.UniqueConstraint(fields=["connection", "name"], name="connection_model_unique"),
            models.CheckConstraint(
                condition=Q(input_price__isnull=True, output_price__isnull=True)
                | Q(input_price__gte=0, output_price__gte=0),
                name="connection_model_price_pair",
            ),
        ]

    def __str__(self) -> str:
        return f"@{self.connection.slug}/{self.name}"

    @property
    def prices(self):
        if self.input_price is None or self.output_price is None:
            return None
        return (self.input_price, self.output_price)


def connection_field(**kwargs) -> models.ForeignKey:
    """A side's connection on another app's row: empty for Hugging Face's router; a
    connection is never deleted under what names it (PROTECT; deleting one wipes its key
    and keeps the row)."""
    return models.ForeignKey(
        Connection, on_delete=models.PROTECT, null=True, blank=True, related_name="+", **kwargs
    )


class RunSides(models.Model):
    """Where each side of a run runs, and how: what a model run (``apps.runs.Run``) and an
    evaluation (``apps.evaluations.Evaluation``, for all its runs) both record.

    ``agent_connection`` / ``user_connection``: the side's connection (empty: Hugging
    Face's router on the starter's own token; the model's name is the owner's
    ``agent_model`` / ``user_model``). ``agent_llm_args`` / ``user_llm_args``: τ²'s
    ``llm_args`` of each side, as ``tau2 run --agent-llm-args / --user-llm-args`` pass
    them (empty on rows from before they could be chosen: τ²'s default); rows with
    different arguments are never ranked together. ``judge_model`` on
    ``judge_connection``: τ²'s natural-language judge (only for tasks whose reward needs
    it, or with ``TAU2_NL_JUDGE=always``); empty, the customer's model judges.
    ``embedding_model`` on ``embedding_connection``: the embeddings of a knowledge
    domain's embedding retrieval configuration (banking_knowledge's
    ``openai_embeddings``…: its documents and the agent's searches); empty for one that
    embeds nothing.
    """

    agent_connection = connection_field()
    user_connection = connection_field()
    agent_llm_args = models.JSONField(null=True, blank=True)
    user_llm_args = models.JSONField(null=True, blank=True)
    judge_model = models.CharField(max_length=255, blank=True)
    judge_connection = connection_field()
    embedding_model = models.CharField(max_length=255, blank=True, default="")
    embedding_connection = connection_field()

    class Meta:
        abstract = True


class ConnectionTestPress(models.Model):
    """One press of a connection's Test by a person, while it has a budget: what the
    limit of presses per person and hour counts (``apps.connections.presses``). A Test
    is one small call on the connection's key that no run records, so no budget could
    count it; the limit bounds what it may spend instead."""

    connection = models.ForeignKey(Connection, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["connection", "user", "at"], name="testpress_who_when")]

    def __str__(self) -> str:
        return f"Test of {self.connection_id} by {self.user_id} at {self.at:%Y-%m-%d %H:%M}"


# What manage.py rotate_vault_keys re-encrypts.
crypto.sealed_fields_register("connections.Connection", "api_key_enc", "headers_enc")
