"""Trace review: staff read a run's conversation and label the run or one of its events."""

from django import forms
from django.contrib import admin
from django.db.models import Count
from django.utils.html import format_html
from django.utils.text import Truncator

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


def _event_choice(event: RunEvent) -> str:
    """``#3 agent: I can help with…``: what a reviewer picks a message by."""
    message = event.message or {}
    text = message.get("content") or ", ".join(
        str(call.get("name")) for call in message.get("tool_calls") or []
    )
    return f"#{event.seq} {event.get_kind_display()}: {Truncator(str(text)).chars(60)}"


def _events_of(form_class, run: Run | None) -> None:
    """Offer only ``run``'s own messages in the form's ``event`` field (none without a run).

    ``ReviewLabel.clean`` refuses another run's message anyway; this keeps it off the list.
    """
    field = form_class.base_fields["event"]
    field.queryset = RunEvent.objects.filter(run=run).order_by("seq")
    field.label_from_instance = _event_choice


class ReviewLabelInline(admin.TabularInline):
    model = ReviewLabel
    fields = ["event", "category", "severity", "note", "created_by", "created_at"]
    readonly_fields = ["created_by", "created_at"]
    extra = 1

    def get_formset(self, request, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)
        _events_of(formset.form, obj)
        return formset


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

    @admin.display(description="labels", ordering="n_labels")
    def n_labels(self, run):
        return run.n_labels

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(n_labels=Count("labels", distinct=True))

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
    """Labels one by one. A new label's run and message come from two pickers, so its
    message may be any run's until ``ReviewLabel.clean`` refuses the mismatch; an existing
    label keeps its run and offers only that run's messages."""

    list_display = ["run", "event", "category", "severity", "origin", "status", "created_at"]
    list_filter = ["category", "severity", "origin", "status"]
    autocomplete_fields = ["run", "event"]
    # An auto-review's finding is decided on the run page (apps.runs.autoreview).
    readonly_fields = ["created_by", "origin", "status", "auto_review", "decided_by", "decided_at"]

    def get_readonly_fields(self, request, obj=None):
        return [*self.readonly_fields, "run"] if obj else self.readonly_fields

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        if obj is not None:
            # A plain list of the run's own messages, not the every-run autocomplete.
            form.base_fields["event"].widget = forms.Select()
            _events_of(form, obj.run)
        return form

    def save_model(self, request, obj, form, change):
        if obj.created_by_id is None:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)
