"""Agent models on Hugging Face Inference Providers, copied from the router's catalogue.

The rows are a read model of ``GET {TAU2_HF_ROUTER_URL}/models`` written only by
``services.catalogue_refresh``; nothing in the product edits them by hand.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

PRICE = {"max_digits": 12, "decimal_places": 6, "null": True, "blank": True}


class InferenceModel(models.Model):
    """A chat model with at least one live provider that can call tools.

    ``provider_count`` and the ``cheapest_*`` fields are denormalised from its offers at
    each refresh, so the picker lists models without reading every offer. A fallback
    model (installed when the router could not be reached and nothing was stored) has no
    offers and no price.
    """

    name = models.CharField(max_length=200, unique=True, help_text="Hub model id: org/name.")
    owned_by = models.CharField(max_length=100, blank=True)
    is_fallback = models.BooleanField(
        default=False, help_text="From the built-in list: the router could not be reached."
    )
    refreshed_at = models.DateTimeField()
    provider_count = models.PositiveSmallIntegerField(
        default=0, help_text="Live providers that support tools."
    )
    cheapest_provider = models.CharField(max_length=64, blank=True)
    cheapest_input_price = models.DecimalField(**PRICE, help_text="USD per 1M input tokens.")
    cheapest_output_price = models.DecimalField(**PRICE, help_text="USD per 1M output tokens.")

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(cheapest_input_price__isnull=True, cheapest_output_price__isnull=True)
                | Q(cheapest_input_price__gte=0, cheapest_output_price__gte=0),
                name="inference_model_cheapest_price_pair",
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_priced(self) -> bool:
        return self.cheapest_input_price is not None


class ProviderOffer(models.Model):
    """One provider serving one model: status, limits, prices, measured speed.

    Prices are USD per 1M tokens; both are NULL when the router gives none — unpriced,
    which is not free.
    """

    class Status(models.TextChoices):
        """What the router last said; every refresh rewrites it (live ⇄ error)."""

        LIVE = "live", "live"
        ERROR = "error", "error"

    model = models.ForeignKey(InferenceModel, on_delete=models.CASCADE, related_name="offers")
    provider = models.CharField(max_length=64)
    status = models.CharField(max_length=8, choices=Status.choices)
    context_length = models.PositiveIntegerField(null=True, blank=True)
    input_price = models.DecimalField(**PRICE, help_text="USD per 1M input tokens.")
    output_price = models.DecimalField(**PRICE, help_text="USD per 1M output tokens.")
    supports_tools = models.BooleanField(default=False)
    supports_structured_output = models.BooleanField(default=False)
    first_token_latency_ms = models.FloatField(null=True, blank=True)
    throughput = models.FloatField(null=True, blank=True, help_text="Tokens per second.")

    class Meta:
        ordering = ["model", "provider"]
        constraints = [
            models.UniqueConstraint(fields=["model", "provider"], name="offer_unique_per_model"),
            models.CheckConstraint(
                condition=Q(input_price__isnull=True, output_price__isnull=True)
                | Q(input_price__gte=0, output_price__gte=0),
                name="offer_price_pair",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model.name}:{self.provider}"

    @property
    def is_priced(self) -> bool:
        return self.input_price is not None and self.output_price is not None
