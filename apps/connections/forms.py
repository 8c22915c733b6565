"""The connection form (add and edit) and the Test's form.

The form reads what a person typed into what the services take: extra headers from
``Name: value`` lines, models from one name per line with optional prices per 1M tokens
(``my-model 0.20 0.80``) plus the ones ticked from the endpoint's list. It never renders
a key or a header's value back: the key field is a password input left empty (on edit,
empty keeps the key, a value rotates it), the headers field shows nothing (their names
are said beside it).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from urllib.parse import urlsplit

from django import forms
from django.conf import settings

from apps.connections.models import BUDGET, Connection
from apps.connections.selectors import people_choices
from apps.connections.services import ConnectionFields, TeamSettings
from tau2_env.llm import outbound

__all__ = ["ConnectionForm", "TestForm", "kind_choices", "parse_headers", "parse_models"]

KIND_HELP = {
    Connection.Kind.OPENAI_COMPATIBLE: (
        "OpenAI-compatible endpoint — vLLM, TGI, SGLang, Ollama, LM Studio, HF Inference Endpoint"
    ),
}
# A header's name as HTTP allows it (RFC 9110 token).
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


class SealedTextarea(forms.Textarea):
    """A textarea that never renders its value: what was typed in it (extra headers,
    which may carry secrets) is not sent back to the browser, even with form errors."""

    def format_value(self, value):
        return None


def kind_choices() -> list[tuple[str, str]]:
    return [(value, KIND_HELP.get(value, label)) for value, label in Connection.Kind.choices]


def default_url(kind: str) -> str:
    """The URL a connection of ``kind`` calls when it names none (``TAU2_PROVIDER_URLS``)."""
    return settings.TAU2_PROVIDER_URLS.get(kind, "")


def parse_headers(text: str) -> dict[str, str]:
    """``Name: value`` per line into a dict; raises ``ValidationError`` naming the line
    (never quoting its value: it may be a secret)."""
    headers: dict[str, str] = {}
    for number, line in enumerate((text or "").splitlines(), start=1):
        if not line.strip():
            continue
        name, sep, value = line.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise forms.ValidationError(f"Line {number}: write one header per line as Name: value.")
        if not _HEADER_NAME.match(name):
            raise forms.ValidationError(f"Line {number}: {name!r} is not a header's name.")
        headers[name] = value
    return headers


def _price(text: str, *, number: int) -> Decimal:
    try:
        price = Decimal(text.strip().lstrip("$").replace(",", ""))
    except InvalidOperation:
        raise forms.ValidationError(
            f"Line {number}: {text!r} is not a price (USD per 1M tokens, e.g. 0.20)."
        ) from None
    if price < 0 or not price.is_finite():
        raise forms.ValidationError(f"Line {number}: a price cannot be negative.")
    return price


def parse_models(text: str) -> list[tuple[str, tuple[Decimal, Decimal] | None]]:
    """One model per line: its name as the endpoint names it (``Qwen/Qwen3-8B``,
    ``acme/checkpoint-7``, ``llama3.1:8b``, ``hf.co/org/model:Q4_K_M``), optionally its
    input and output prices per 1M tokens (``my-model 0.20 0.80``, ``Qwen/Qwen3-8B $0.20 /
    $0.80``); ``None`` prices: litellm's, or unpriced. The name is the line's first word,
    slashes and all: only what follows it is read as prices."""
    models: dict[str, tuple[Decimal, Decimal] | None] = {}
    for number, line in enumerate((text or "").splitlines(), start=1):
        words = line.split(None, 1)
        if not words:
            continue
        name, prices = words[0], " ".join(words[1:]).replace("/", " ").split()
        if len(name) > 200:
            raise forms.ValidationError(f"Line {number}: a model's name is at most 200 characters.")
        if not prices:
            models[name] = None
        elif len(prices) == 2:
            models[name] = (_price(prices[0], number=number), _price(prices[1], number=number))
        else:
            raise forms.ValidationError(
                f"Line {number}: write the model's name, then optionally its input and "
                "output prices per 1M tokens, e.g. my-model 0.20 0.80."
            )
    return list(models.items())


def models_text(connection: Connection) -> str:
    """The models field of ``connection`` as it is: entered prices kept on their line."""
    lines = []
    for model in connection.models.all():
        if model.price_source == model.PriceSource.ENTERED and model.prices:
            lines.append(
                f"{model.name} {model.input_price.normalize():f} {model.output_price.normalize():f}"
            )
        else:
            lines.append(model.name)
    return "\n".join(lines)


def _check_base_url(value: str) -> str:
    value = (value or "").strip()
    if not value:
        return ""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise forms.ValidationError("Enter the endpoint's URL, e.g. http://my-vllm:8000/v1.")
    if parts.username or parts.password or parts.query or parts.fragment:
        # Pages show the URL: a credential in it would be shown too.
        raise forms.ValidationError(
            "Put credentials in the API key or an extra header, not in the URL (no user, "
            "query or fragment)."
        )
    try:
        # Checked again at every connection (a name may resolve elsewhere later).
        outbound.check_url(value)
    except outbound.DestinationRefused as exc:
        raise forms.ValidationError(f"{str(exc)[:1].upper()}{str(exc)[1:]}.") from None
    return value.rstrip("/")


class ConnectionForm(forms.Form):
    """Add (``connection=None``) or edit a connection, for ``user``.

    Staff adding one choose whether it is the team's or theirs; a member's is theirs.
    Who may use it and its limits are fields of a team connection only (staff's).
    """

    FOR_TEAM, FOR_ME = "team", "me"

    scope = forms.ChoiceField(
        label="For",
        choices=[(FOR_TEAM, "the team (staff choose who may use it)"), (FOR_ME, "only me")],
        widget=forms.RadioSelect,
        initial=FOR_TEAM,
    )
    kind = forms.ChoiceField(label="Kind", choices=kind_choices)
    name = forms.CharField(label="Name", max_length=80)
    base_url = forms.CharField(label="Base URL", max_length=500, required=False)
    api_key = forms.CharField(
        label="API key",
        required=False,
        max_length=4000,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
    )
    headers = forms.CharField(
        label="Extra headers",
        required=False,
        max_length=8000,
        widget=SealedTextarea(
            attrs={"rows": 2, "placeholder": "X-Org-Id: value", "autocomplete": "off"}
        ),
    )
    clear_headers = forms.BooleanField(
        label="Remove the extra headers",
        required=False,
        widget=forms.CheckboxInput(attrs={"style": "width: auto"}),
    )
    models = forms.CharField(
        label="Models",
        required=False,
        max_length=50_000,
        widget=forms.Textarea(attrs={"rows": 4, "placeholder": "my-model\nother-model 0.20 0.80"}),
    )
    listed_models = forms.MultipleChoiceField(required=False, choices=())
    access = forms.ChoiceField(
        label="Who may use it",
        choices=Connection.Access.choices,
        initial=Connection.Access.EVERYONE,
        widget=forms.RadioSelect,
    )
    allowed_users = forms.ModelMultipleChoiceField(
        label="People named",
        queryset=people_choices(),
        required=False,
        widget=forms.CheckboxSelectMultiple(attrs={"style": "width: auto"}),
    )
    monthly_budget_usd = forms.DecimalField(
        label="Monthly budget for everyone (USD)",
        required=False,
        min_value=0,
        max_digits=BUDGET["max_digits"],
        decimal_places=BUDGET["decimal_places"],
    )
    person_monthly_budget_usd = forms.DecimalField(
        label="Monthly budget per person (USD)",
        required=False,
        min_value=0,
        max_digits=BUDGET["max_digits"],
        decimal_places=BUDGET["decimal_places"],
    )
    max_in_flight = forms.IntegerField(
        label="Runs calling it at once", required=False, min_value=1, max_value=32767
    )

    TEAM_FIELDS = (
        "access",
        "allowed_users",
        "monthly_budget_usd",
        "person_monthly_budget_usd",
        "max_in_flight",
    )

    def __init__(self, *args, user, connection: Connection | None = None, **kwargs):
        self.user = user
        self.connection = connection
        if connection is not None:
            kwargs.setdefault("initial", {}).update(
                {
                    "name": connection.name,
                    "base_url": connection.base_url,
                    "models": models_text(connection),
                    "access": connection.access,
                    "allowed_users": list(connection.allowed_users.all()),
                    "monthly_budget_usd": connection.monthly_budget_usd,
                    "person_monthly_budget_usd": connection.person_monthly_budget_usd,
                    "max_in_flight": connection.max_in_flight,
                }
            )
        super().__init__(*args, **kwargs)
        # Whatever the endpoint listed may be ticked: names only, checked like typed ones.
        listed = self.data.getlist("listed_models") if hasattr(self.data, "getlist") else []
        self.fields["listed_models"].choices = [(name, name) for name in listed]
        self.fields["allowed_users"].queryset = people_choices()
        if connection is not None:
            # A connection's kind and whose it is never change: add another instead.
            del self.fields["scope"], self.fields["kind"]
        else:
            del self.fields["clear_headers"]
            if not user.is_staff:
                del self.fields["scope"]
        if not self.for_team:
            for name in self.TEAM_FIELDS:
                self.fields.pop(name, None)

    @property
    def chosen_kind(self) -> str:
        if self.connection is not None:
            return self.connection.kind
        value = self.data.get("kind") if self.is_bound else None
        return value if value in Connection.Kind.values else Connection.Kind.OPENAI

    @property
    def for_team(self) -> bool:
        """Whether the form is about a team connection (and shows the team's fields)."""
        if self.connection is not None:
            return self.connection.is_team
        if not self.user.is_staff:
            return False
        value = self.data.get("scope") if self.is_bound else self.initial.get("scope")
        return (value or self.FOR_TEAM) == self.FOR_TEAM

    @property
    def default_url(self) -> str:
        return default_url(self.chosen_kind)

    def clean_base_url(self) -> str:
        return _check_base_url(self.cleaned_data.get("base_url", ""))

    def clean_headers(self) -> dict[str, str]:
        return parse_headers(self.cleaned_data.get("headers", ""))

    def clean_models(self):
        return parse_models(self.cleaned_data.get("models", ""))

    def clean(self):
        cleaned = super().clean()
        kind = self.chosen_kind
        missing_url = kind == Connection.Kind.OPENAI_COMPATIBLE and not cleaned.get("base_url")
        if missing_url and "base_url" not in self.errors:
            self.add_error("base_url", "An OpenAI-compatible endpoint needs its base URL.")
        needs_key = kind != Connection.Kind.OPENAI_COMPATIBLE and self.connection is None
        if needs_key and not cleaned.get("api_key"):
            self.add_error("api_key", f"{Connection.Kind(kind).label} needs an API key.")
        return cleaned

    def model_items(self) -> list:
        """The models to offer: the typed lines, then the ticked ones not typed."""
        typed = list(self.cleaned_data.get("models") or [])
        names = {name for name, _ in typed}
        ticked = [
            name for name in self.cleaned_data.get("listed_models") or [] if name not in names
        ]
        return [*typed, *((name, None) for name in ticked)]

    def headers_given(self) -> dict[str, str] | None:
        """The headers to set: ``None`` keeps them (edit, nothing typed), ``{}`` removes."""
        headers = self.cleaned_data.get("headers") or {}
        if self.connection is None:
            return headers
        if self.cleaned_data.get("clear_headers"):
            return {}
        return headers or None

    def team_settings(self) -> TeamSettings | None:
        """Who may use it and its limits, for a team connection; ``None`` for a personal one."""
        if not self.for_team:
            return None
        data = self.cleaned_data
        return TeamSettings(
            access=data.get("access") or Connection.Access.EVERYONE,
            allowed_users=tuple(data.get("allowed_users") or ()),
            monthly_budget_usd=data.get("monthly_budget_usd"),
            person_monthly_budget_usd=data.get("person_monthly_budget_usd"),
            max_in_flight=data.get("max_in_flight"),
        )

    def connection_fields(self) -> ConnectionFields:
        """What the valid form says, as the services take it (on edit, an empty key and
        no headers typed keep them)."""
        data = self.cleaned_data
        return ConnectionFields(
            name=data["name"],
            base_url=data.get("base_url") or "",
            api_key=data.get("api_key") or "",
            headers=self.headers_given(),
            models=tuple(self.model_items()),
            team=self.team_settings(),
        )


class TestForm(forms.Form):
    """Which of the connection's models the Test calls."""

    model = forms.ChoiceField(
        label="Model", widget=forms.Select(attrs={"data-testid": "test-model"})
    )

    def __init__(self, *args, connection: Connection, **kwargs):
        super().__init__(*args, **kwargs)
        names = list(connection.models.values_list("name", flat=True))
        self.fields["model"].choices = [(name, name) for name in names]
        if names:
            self.fields["model"].initial = (connection.last_test or {}).get("model") or names[0]
