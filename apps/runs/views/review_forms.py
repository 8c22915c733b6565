"""The forms of review by an LLM: start an auto-review (a run's, an evaluation's), edit a
finding."""

from __future__ import annotations

from django import forms

from apps.connections import picker
from apps.connections.picker import RouteField
from apps.runs import autoreview
from apps.runs.models import AutoReview, ReviewLabel


class AutoReviewForm(forms.Form):
    reviewer_model = RouteField(
        role="reviewer",
        label="Reviewer model",
        help_text="Reads the conversation, the task's user scenario and the domain policy, and "
        "says what went wrong (τ²'s review). It runs on your credentials.",
    )
    mode = forms.ChoiceField(
        label="Reads",
        choices=AutoReview.Mode.choices,
        initial=AutoReview.Mode.FULL,
        required=False,
        help_text="tau2 review --mode: full (the agent and the customer) or user (the "
        "simulated customer only).",
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Only the modes this τ² has; the others are said, with why, under the field.
        refusals = autoreview.modes()
        field = self.fields["mode"]
        field.choices = [(m, label) for m, label in AutoReview.Mode.choices if not refusals[m]]
        missing = [f"{label}: {refusals[m]}" for m, label in AutoReview.Mode.choices if refusals[m]]
        if missing:
            field.help_text = "Not here — " + "; ".join(missing) + "."

    def clean_mode(self) -> str:
        return self.cleaned_data.get("mode") or AutoReview.Mode.FULL


class EvaluationAutoReviewForm(AutoReviewForm):
    which = forms.ChoiceField(
        choices=[
            (autoreview.WHICH_FAILURES, "its failures"),
            (autoreview.WHICH_ALL, "all its runs"),
            (autoreview.WHICH_EACH, "every run, now and as each ends"),
        ],
        initial=autoreview.WHICH_FAILURES,
        label="Review",
    )


class FindingForm(forms.Form):
    source = forms.ChoiceField(choices=ReviewLabel.Source.choices)
    severity = forms.ChoiceField(choices=ReviewLabel.Severity.choices)
    kind = forms.ChoiceField(choices=ReviewLabel.Kind.choices, label="Category")
    justification = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), max_length=4000)


def autoreview_form(user, *, evaluation: bool = False, data=None) -> AutoReviewForm:
    form = (EvaluationAutoReviewForm if evaluation else AutoReviewForm)(data)
    picker.for_user(form, user)
    return form
