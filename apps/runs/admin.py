"""Trace review: staff read a run's conversation and label the run or one of its events."""

from django.contrib import admin
from django.utils.html import format_html

from apps.runs import presenters
from apps.runs.models import ReviewLabel, Run, RunEvent


class RunEventInline(admin.TabularInline):
    model = RunEvent
    fields = ["seq", "kind", "rendered", "latency_ms", "prompt_tokens", "completion_tokens"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ["seq"]
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False

    @admin.display(description="message")
    def rendered(self, event):
        return format_html("<div class='trace-event'>{}</div>", presenters.event_html(event))


class ReviewLabelInline(admin.TabularInline):
    model = ReviewLabel
    fields = ["event", "category", "severity", "note", "created_by", "created_at"]
    readonly_fields = ["created_by", "created_at"]
    extra = 1
    autocomplete_fields = ["event"]


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "kind",
        "domain",
        "task_ref",
        "agent_model",
        "created_by",
        "status",
        "reward",
        "created_at",
        "n_labels",
    ]
    list_filter = [
        "status",
        "kind",
        "domain",
        "agent_model",
        "labels__category",
        "labels__severity",
    ]
    search_fields = ["task__task_id", "agent_model", "created_by__username", "error"]
    readonly_fields = [f.name for f in Run._meta.fields]
    inlines = [ReviewLabelInline, RunEventInline]
    list_select_related = ["task", "created_by"]

    def has_add_permission(self, request):
        return False

    @admin.display(description="task")
    def task_ref(self, run):
        return run.task.task_id

    @admin.display(description="labels")
    def n_labels(self, run):
        return run.labels.count()

    def save_formset(self, request, form, formset, change):
        for label in formset.save(commit=False):
            if isinstance(label, ReviewLabel) and label.created_by_id is None:
                label.created_by = request.user
            label.save()
        for obj in formset.deleted_objects:
            obj.delete()
        formset.save_m2m()


@admin.register(RunEvent)
class RunEventAdmin(admin.ModelAdmin):
    list_display = ["run", "seq", "kind"]
    search_fields = ["run__id"]
    readonly_fields = [
        "run",
        "seq",
        "kind",
        "message",
        "latency_ms",
        "prompt_tokens",
        "completion_tokens",
        "cost_usd",
    ]

    def has_add_permission(self, request):
        return False

    def get_search_results(self, request, queryset, search_term):
        if search_term.isdigit():
            return queryset.filter(run_id=int(search_term)), False
        return super().get_search_results(request, queryset, search_term)


@admin.register(ReviewLabel)
class ReviewLabelAdmin(admin.ModelAdmin):
    list_display = ["run", "event", "category", "severity", "created_by", "created_at"]
    list_filter = ["category", "severity"]
    autocomplete_fields = ["run", "event"]
    readonly_fields = ["created_by"]

    def save_model(self, request, obj, form, change):
        if obj.created_by_id is None:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)
