from django.contrib import admin

from apps.tasks.models import CatalogueLoad, Domain, Split, Task, Tool


class ReadOnlyAdmin(admin.ModelAdmin):
    """The catalogue mirrors τ²; it is reloaded with `manage.py load_tasks`, never edited."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Domain)
class DomainAdmin(ReadOnlyAdmin):
    list_display = ["name", "position", "content_hash", "loaded_at"]


@admin.register(Split)
class SplitAdmin(ReadOnlyAdmin):
    list_display = ["domain", "name", "size"]
    list_filter = ["domain"]


@admin.register(Tool)
class ToolAdmin(ReadOnlyAdmin):
    list_display = ["name", "domain", "requestor", "kind"]
    list_filter = ["domain", "requestor", "kind"]
    search_fields = ["name", "description"]


@admin.register(Task)
class TaskAdmin(ReadOnlyAdmin):
    list_display = ["task_id", "domain", "title", "expected_calls", "changes_db"]
    list_filter = ["domain", "changes_db", "splits__name"]
    search_fields = ["task_id", "title", "reason_for_call"]
    show_full_result_count = False


@admin.register(CatalogueLoad)
class CatalogueLoadAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "tau2_version", "task_set_hash", "changed_domains"]
