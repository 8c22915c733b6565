"""A form field for picking the agent model, for any form that starts a run."""

from __future__ import annotations

from django import forms
from django.template.loader import render_to_string

from apps.inference.selectors import ResolvedModel, model_choices, resolve_agent_model


class ModelPickerWidget(forms.Widget):
    """Renders ``includes/model_picker.html`` with the catalogue as it is now."""

    def render(self, name, value, attrs=None, renderer=None):
        return render_to_string(
            "includes/model_picker.html",
            {"choices": model_choices(), "name": name, "selected": value or ""},
        )


class AgentModelField(forms.CharField):
    """``org/model``, ``org/model:provider``, ``:fastest`` or ``:cheapest``.

    Cleans to a :class:`~apps.inference.selectors.ResolvedModel` (model, provider or
    policy, prices to charge); an unknown model or a provider that cannot run an agent is
    a validation error with the selector's message.
    """

    widget = ModelPickerWidget

    def __init__(self, **kwargs):
        kwargs.setdefault("max_length", 300)
        super().__init__(**kwargs)

    def clean(self, value) -> ResolvedModel | None:
        text = super().clean(value)
        if not text:
            return None
        try:
            return resolve_agent_model(text)
        except ValueError as exc:
            raise forms.ValidationError(str(exc), code="invalid_model") from exc
