"""The new-key form of ``/accounts/keys/``: a name, and optionally the sessions the key
may hold at once (within the server's maximum); the playground's customer picker."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.core.validators import MaxValueValidator

from apps.agents.models import ApiKey
from apps.connections.picker import RouteField, for_user


class ApiKeyForm(forms.Form):
    """A name, ``max_sessions`` (empty: the key shares its owner's default cap) and
    ``scope`` (empty: read and start)."""

    name = forms.CharField(
        max_length=100,
        error_messages={
            "required": "Give the key a name (at most 100 characters).",
            "max_length": "Give the key a name (at most 100 characters).",
        },
    )
    max_sessions = forms.IntegerField(required=False, min_value=1)
    scope = forms.ChoiceField(
        choices=ApiKey.Scope.choices,
        required=False,
        error_messages={"invalid_choice": "A key may read, or read and start."},
    )

    def clean_scope(self) -> str:
        """Empty (an older page, a script): read and start, as keys always could."""
        return self.cleaned_data.get("scope") or ApiKey.Scope.START

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        most = settings.TAU2_SESSIONS_PER_KEY_MAX
        field = self.fields["max_sessions"]
        field.validators.append(MaxValueValidator(most))
        bounds = f"Sessions at once: a whole number from 1 to {most} (this server's maximum)."
        field.error_messages.update(min_value=bounds, max_value=bounds, invalid=bounds)


class PlaygroundForm(forms.Form):
    """The playground's customer: the one model picker, as every form that starts a run
    has it. The page never posts it: ``static/js/agents_playground.js`` sends its value as
    the reset's ``user_model``, which the agent faces check (``credentials.customer_route``).
    Pass ``user``."""

    user_model = RouteField(
        role="customer",
        label="Customer model",
        required=False,
        optional=True,
        empty_label="The server's default customer (on Hugging Face, on your token)",
    )

    def __init__(self, *args, user=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for_user(self, user)
