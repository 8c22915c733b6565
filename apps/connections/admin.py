"""Connections in the admin: read-only, and never a key.

The sealed columns (``api_key_enc``, ``headers_enc``) are left out of every admin form
and list; the hint and the headers' names are what staff see. Connections are added,
changed, rotated and deleted on ``/connections/``, where keys are sealed as they arrive
and a deletion wipes them but keeps the row that runs name.
"""

from django.contrib import admin

from apps.connections.models import Connection, ConnectionModel

SEALED = ("api_key_enc", "headers_enc")


class ReadOnlyMixin:
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ConnectionModelInline(ReadOnlyMixin, admin.TabularInline):
    model = ConnectionModel
    extra = 0
    fields = ["name", "input_price", "output_price", "price_source"]


@admin.register(Connection)
class ConnectionAdmin(ReadOnlyMixin, admin.ModelAdmin):
    exclude = SEALED
    list_display = ["name", "slug", "kind", "owner", "access", "key_hint", "deleted_at"]
    list_filter = ["kind", "access"]
    search_fields = ["name", "slug"]
    list_select_related = ["owner"]
    inlines = [ConnectionModelInline]


@admin.register(ConnectionModel)
class ConnectionModelAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["name", "connection", "input_price", "output_price", "price_source"]
    list_filter = ["price_source"]
    search_fields = ["name", "connection__slug"]
    list_select_related = ["connection"]
