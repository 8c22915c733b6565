from django.contrib import admin

from apps.inference.models import InferenceModel, ProviderOffer


class ReadOnlyMixin:
    """The catalogue mirrors the router; `manage.py refresh_models` rewrites it."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ProviderOfferInline(ReadOnlyMixin, admin.TabularInline):
    model = ProviderOffer
    extra = 0
    fields = [
        "provider",
        "status",
        "supports_tools",
        "supports_structured_output",
        "context_length",
        "input_price",
        "output_price",
        "first_token_latency_ms",
        "throughput",
    ]


@admin.register(InferenceModel)
class InferenceModelAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = [
        "name",
        "provider_count",
        "cheapest_provider",
        "cheapest_input_price",
        "cheapest_output_price",
        "is_fallback",
        "refreshed_at",
    ]
    list_filter = ["is_fallback", "owned_by"]
    search_fields = ["name"]
    inlines = [ProviderOfferInline]


@admin.register(ProviderOffer)
class ProviderOfferAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = [
        "model",
        "provider",
        "status",
        "supports_tools",
        "input_price",
        "output_price",
        "context_length",
    ]
    list_filter = ["status", "supports_tools", "provider"]
    search_fields = ["model__name", "provider"]
    list_select_related = ["model"]
