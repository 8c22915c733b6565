"""The new-key form of ``/accounts/keys/``: a name, and optionally the sessions the key
may hold at once (within the server's maximum)."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.core.validators import MaxValueValidator


class ApiKeyForm(forms.Form):
    """A name, and ``max_sessions`` (empty: the key shares its owner's default cap)."""

    name = forms.CharField(
        max_length=100,
        error_messages={
            "required": "Give the key a name (at most 100 characters).",
            "max_length": "Give the key a name (at most 100 characters).",
        },
    )
    max_sessions = forms.IntegerField(required=False, min_value=1)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        most = settings.TAU2_SESSIONS_PER_KEY_MAX
        field = self.fields["max_sessions"]
        field.validators.append(MaxValueValidator(most))
        bounds = f"Sessions at once: a whole number from 1 to {most} (this server's maximum)."
        field.error_messages.update(min_value=bounds, max_value=bounds, invalid=bounds)
