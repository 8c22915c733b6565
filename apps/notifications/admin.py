"""Webhook subscriptions and deliveries in the admin: read-only, and never a URL or a
secret (their sealed columns are in no form or list; the URL's host is what staff see).
They are added, changed and deleted on ``/notifications/``."""

from django.contrib import admin

from apps.notifications.models import Delivery, Subscription


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Subscription)
class SubscriptionAdmin(ReadOnly):
    list_display = ["name", "owner", "url_shown", "format", "active", "created_at"]
    fields = ["name", "owner", "url_shown", "events", "format", "active", "created_at"]
    readonly_fields = fields


@admin.register(Delivery)
class DeliveryAdmin(ReadOnly):
    list_display = ["uid", "subscription", "event", "status", "attempts", "created_at"]
    list_filter = ["status", "event"]
    fields = ["uid", "subscription", "event", "evaluation", "status", "attempts", "payload"]
    readonly_fields = fields
