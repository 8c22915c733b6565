from django.contrib import admin

from apps.accounts.models import HFCredential


@admin.register(HFCredential)
class HFCredentialAdmin(admin.ModelAdmin):
    """Metadata only: the encrypted token fields are neither listed nor shown nor editable."""

    list_display = ("user", "expires_at", "scope_list", "refreshed_at", "refresh_count", "revoked")
    list_filter = ("revoked_at",)
    search_fields = ("user__username",)
    fields = (
        "user",
        "scopes",
        "expires_at",
        "signed_in_at",
        "refreshed_at",
        "refresh_count",
        "revoked_at",
    )
    readonly_fields = fields

    def has_add_permission(self, request):
        return False  # credentials come from sign-in only

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="scopes")
    def scope_list(self, obj):
        return " ".join(obj.scopes or [])

    @admin.display(boolean=True)
    def revoked(self, obj):
        return obj.revoked_at is not None
