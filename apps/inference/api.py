"""Read-only JSON API of the model catalogue: /api/models/."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers

from apps.inference import selectors

PRICE = {"max_digits": 12, "decimal_places": 6, "allow_null": True}


class OfferSerializer(serializers.Serializer):
    provider = serializers.CharField()
    value = serializers.CharField(
        help_text="What to pick to pin this provider: org/model:provider."
    )
    input_price = serializers.DecimalField(
        **PRICE, help_text="USD per 1M input tokens; null when unpriced (not free)."
    )
    output_price = serializers.DecimalField(
        **PRICE, help_text="USD per 1M output tokens; null when unpriced (not free)."
    )
    price_label = serializers.CharField()
    context_length = serializers.IntegerField(allow_null=True)
    supports_structured_output = serializers.BooleanField()
    first_token_latency_ms = serializers.FloatField(allow_null=True)
    throughput = serializers.FloatField(allow_null=True, help_text="Tokens per second.")


class ModelSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="Hub model id: org/model.")
    owned_by = serializers.CharField()
    is_fallback = serializers.BooleanField(
        help_text="From the built-in list (the router could not be read): providers unknown."
    )
    label = serializers.CharField(help_text="model · N providers · from $in / $out")
    provider_count = serializers.IntegerField()
    input_price = serializers.DecimalField(
        **PRICE, help_text="The cheapest priced provider's input price; null when unpriced."
    )
    output_price = serializers.DecimalField(
        **PRICE, help_text="The cheapest priced provider's output price; null when unpriced."
    )
    price_label = serializers.CharField()
    providers = OfferSerializer(source="offers", many=True)


@extend_schema(
    parameters=[OpenApiParameter("q", str, description="Words to find in the model id.")]
)
class ModelList(generics.ListAPIView):
    """Agent models on Hugging Face Inference Providers: chat models with a live provider
    that can call tools, each provider cheapest first. Prices are USD per 1M tokens."""

    serializer_class = ModelSerializer
    pagination_class = None  # a few hundred models at most; the picker wants them all

    def get_queryset(self):
        return selectors.model_choices(q=(self.request.query_params.get("q") or "")[:200])
