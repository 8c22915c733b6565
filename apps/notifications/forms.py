"""The subscription form: name, URL (refused in words when internal), events, format;
staff choose whether it is theirs or the team's."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError

from apps.notifications.models import SUBSCRIBABLE, Subscription
from apps.notifications.services import SubscriptionFields, webhook_url_check

__all__ = ["SubscriptionForm"]


class SubscriptionForm(forms.Form):
    FOR_ME = "me"
    FOR_TEAM = "team"

    name = forms.CharField(max_length=80)
    url = forms.CharField(
        max_length=1000,
        required=False,
        label="URL",
        help_text="Where to POST. On edit, leave empty to keep the one there.",
    )
    events = forms.MultipleChoiceField(
        choices=[(e.value, e.label) for e in SUBSCRIBABLE], widget=forms.CheckboxSelectMultiple
    )
    format = forms.ChoiceField(
        choices=Subscription.Format.choices,
        initial=Subscription.Format.JSON,
        widget=forms.RadioSelect,
    )
    active = forms.BooleanField(required=False, initial=True)
    scope = forms.ChoiceField(
        choices=[(FOR_ME, "only me"), (FOR_TEAM, "the team")],
        required=False,
        initial=FOR_ME,
        widget=forms.RadioSelect,
    )

    def __init__(self, *args, user, subscription: Subscription | None = None, **kwargs):
        self.user = user
        self.subscription = subscription
        if subscription is not None and "initial" not in kwargs:
            kwargs["initial"] = {
                "name": subscription.name,
                "events": subscription.events,
                "format": subscription.format,
                "active": subscription.active,
            }
        super().__init__(*args, **kwargs)
        if subscription is None:
            self.fields["url"].required = True
            self.fields["url"].help_text = "Where to POST."

    @property
    def may_choose_team(self) -> bool:
        return self.subscription is None and bool(getattr(self.user, "is_staff", False))

    def clean_url(self) -> str:
        value = (self.cleaned_data.get("url") or "").strip()
        if not value:
            return ""
        try:
            return webhook_url_check(value)
        except ValidationError as exc:
            raise forms.ValidationError(exc.messages) from None

    @property
    def for_team(self) -> bool:
        return self.may_choose_team and self.cleaned_data.get("scope") == self.FOR_TEAM

    def subscription_fields(self) -> SubscriptionFields:
        data = self.cleaned_data
        return SubscriptionFields(
            name=data["name"],
            url=data.get("url", ""),
            events=data["events"],
            format=data["format"],
            active=data.get("active", False),
        )
