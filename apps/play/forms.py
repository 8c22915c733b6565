from django import forms
from django.conf import settings

from apps.bounds import integer_field
from apps.connections.picker import EmbeddingField, RouteField, for_user
from apps.runs import defaults
from apps.runs.forms import has_retrieval, retrieval_clean, retrieval_field
from apps.runs.models import Run
from apps.tasks import selectors as task_selectors
from apps.tasks.models import Split, Task
from tau2_env.gate.arguments import parse_arguments


class PlayStartForm(forms.Form):
    """Which task to play: one picked with the run form's task picker (domain, split, task
    id), or a random one of the split (reproducible with a seed); the customer's model
    (the one model picker), the step limit (the shared default) and, when a domain has
    some, the retrieval configuration (the run form's choice). Pass ``user``."""

    domain = forms.ChoiceField(label="Domain")
    # Sent by the task picker's split list (includes/split_select.html).
    split = forms.CharField(label="Split", max_length=32, initial="base")
    task_id = forms.CharField(
        label="Task",
        max_length=255,
        required=False,
        help_text="Type words of its title or its id, then pick it from the list; empty: a "
        "random task of the split.",
    )
    seed = integer_field(
        Run, "given_seed", label="Seed", required=False, help_text="Picks the same task again."
    )
    user_model = RouteField(
        role="customer",
        label="Customer model",
        required=False,
        optional=True,
        empty_label="The server's default customer (on Hugging Face, on your token)",
        help_text="Who plays the customer: on Hugging Face (your own token) or a connection "
        "(its key).",
    )
    max_steps = integer_field(
        Run,
        "max_steps",
        label="Step limit",
        min_value=1,
        required=False,
        initial=defaults.MAX_STEPS,
        help_text="Empty: τ²'s default.",
    )
    retrieval_config = forms.CharField(required=False)  # retrieval_field(), or none at all
    embedding_model = EmbeddingField()  # with retrieval_config only

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        for_user(self, user)
        self.fields["domain"].choices = [(d.name, d.name) for d in task_selectors.domain_list()]
        self.fields["domain"].widget.attrs["data-testid"] = "domain"
        if has_retrieval():  # a knowledge domain (banking_knowledge on τ² 1.x)
            self.fields["retrieval_config"] = retrieval_field()
        else:
            del self.fields["retrieval_config"]
            del self.fields["embedding_model"]
        self.fields["task_id"].widget.attrs.update(
            {
                "data-testid": "task-input",
                "autocomplete": "off",
                "spellcheck": "false",
                "aria-controls": "task-picker",
            }
        )
        self.fields["max_steps"].max_value = settings.TAU2_RUN_MAX_STEPS
        self.fields["max_steps"].initial = defaults.max_steps()  # the cap, if lower
        self.fields["max_steps"].validators.append(
            forms.IntegerField(max_value=settings.TAU2_RUN_MAX_STEPS).validators[-1]
        )

    def clean(self):
        data = super().clean()
        domain, task_id, split = data.get("domain"), data.get("task_id"), data.get("split")
        if domain and task_id:
            data["task"] = Task.objects.filter(domain_id=domain, task_id=task_id).first()
            if data["task"] is None:
                self.add_error("task_id", f"No task {task_id!r} in {domain}.")
        elif domain and split and not Split.objects.filter(domain_id=domain, name=split).exists():
            self.add_error("split", f"No split {split!r} in {domain}.")
        retrieval_clean(self, data, domain)
        return data


class SayForm(forms.Form):
    text = forms.CharField(max_length=20_000, strip=True)


class ToolForm(forms.Form):
    """A tool call as the page sends it: the tool's name and its arguments as JSON text
    (a JSON object within the size and depth limits, no NUL character)."""

    name = forms.CharField(max_length=128)
    arguments = forms.CharField(required=False, initial="{}")

    def clean_arguments(self):
        raw = self.cleaned_data.get("arguments") or "{}"
        try:
            return parse_arguments(raw, allow_nul=False)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
