"""The one model picker of every form that starts a run, and τ²'s LLM arguments.

:class:`RouteField` lists Hugging Face's router models (``apps.inference``'s catalogue)
and the models of every connection the person may use, grouped by where they run, with
prices; it cleans to a :class:`~apps.connections.llm_routes.ResolvedRoute`. A form that has
one calls :func:`for_user` with the person so each field lists, and accepts, only what
they may use.

:func:`add_llm_args_fields` adds one side's ``tau2 run --agent-llm-args`` /
``--user-llm-args`` choices (temperature, top_p, max_tokens, reasoning_effort, provider
extras as JSON) to a form; :func:`llm_args_from` reads them back as τ²'s ``llm_args``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from django import forms
from django.template.loader import render_to_string

from apps.connections.llm_routes import (
    ResolvedRoute,
    connection_value,
    route_resolve,
    router_refusal,
)
from apps.connections.llm_routes import usable_connections as connections_of
from apps.inference.pricing import price_label
from apps.inference.selectors import model_choices
from tau2_env.llm.embeddings import EMBEDDING_PROVIDERS
from tau2_env.llm.llm_args import REASONING_EFFORTS, LLMArgsError, llm_args_clean

__all__ = [
    "EmbeddingField",
    "RouteField",
    "add_llm_args_fields",
    "connection_groups",
    "for_user",
    "llm_args_from",
    "llm_args_initial",
    "picks_a_connection",
    "sides_of",
]


@dataclass(frozen=True)
class ConnectionOption:
    value: str  # "@slug/model"
    model: str
    price_label: str


@dataclass(frozen=True)
class ConnectionGroup:
    """One connection's models in the picker: ``label`` says where they run."""

    label: str
    personal: bool
    options: tuple[ConnectionOption, ...]


def connection_groups(user) -> list[ConnectionGroup]:
    """The models of every connection ``user`` may use, one group per connection."""
    groups = []
    for connection in connections_of(user):
        options = tuple(
            ConnectionOption(
                value=connection_value(slug=connection.slug, model=m.name),
                model=m.name,
                price_label=price_label(m.input_price, m.output_price),
            )
            for m in connection.models.all()
        )
        if options:
            owner = "yours" if connection.owner_id else "team"
            groups.append(
                ConnectionGroup(
                    label=f"{connection.name} · {connection.get_kind_display()} · {owner}",
                    personal=connection.owner_id is not None,
                    options=options,
                )
            )
    return groups


class RoutePickerWidget(forms.Widget):
    """``includes/model_picker.html`` with the catalogue and the person's connections.
    It renders its own label (``is_picker``: templates skip theirs)."""

    is_picker = True

    def __init__(
        self,
        *,
        label: str = "",
        optional: bool = False,
        empty_label: str = "",
        testid: str = "model-picker",
    ):
        super().__init__()
        self.user = None
        self.testid = testid
        self.label = label
        self.optional = optional
        self.empty_label = empty_label

    def render(self, name, value, attrs=None, renderer=None):
        choices, groups = model_choices(), connection_groups(self.user)
        listed = {o.value for g in groups for o in g.options}
        for model in choices:
            listed.update((model.name, *(v for v, _ in model.policies)))
            listed.update(o.value for o in model.offers)
        selected = value.value if isinstance(value, ResolvedRoute) else (value or "")
        return render_to_string(
            "includes/model_picker.html",
            {
                "choices": choices,
                "connections": groups,
                "name": name,
                "selected": selected,
                # A value given that the lists do not hold (a link's, a default's): kept.
                "unlisted": selected if selected and selected not in listed else "",
                "label": self.label,
                "optional": self.optional,
                "empty_label": self.empty_label,
                "testid": self.testid,
                # Why the router's models would not run for this person (no Hugging Face
                # sign-in): said by the picker, with the two ways to fix it.
                "router_refusal": router_refusal(user=self.user) if self.user else None,
            },
        )


class RouteField(forms.CharField):
    """A router model (``org/model[:provider|:policy]``) or a connection's (``@slug/model``).

    Cleans to a :class:`ResolvedRoute` (``None`` when left empty and not required); a
    model the person may not use, or that cannot run, is a validation error saying why.
    """

    def __init__(self, *, role: str = "agent", optional: bool = False, empty_label="", **kw):
        kw.setdefault("max_length", 300)
        label = kw.get("label") or f"{role.capitalize()} model"
        kw["label"] = label
        kw.setdefault(
            "widget",
            RoutePickerWidget(
                label=label,
                optional=optional,
                empty_label=empty_label,
                testid="model-picker" if role == "agent" else f"{role}-picker",
            ),
        )
        super().__init__(**kw)
        self.role = role
        self.user = None

    def clean(self, value) -> ResolvedRoute | None:
        text = super().clean(value)
        if not text:
            return None
        try:
            return route_resolve(text, user=self.user, role=self.role)
        except ValueError as exc:
            raise forms.ValidationError(str(exc), code="invalid_model") from exc


def for_user(form: forms.Form, user) -> None:
    """Let every model field of ``form`` list and accept what ``user`` may use."""
    for field in form.fields.values():
        if isinstance(field, RouteField):
            field.user = user
            field.widget.user = user
        elif hasattr(field, "base_field") and isinstance(field.base_field, RouteField):
            field.base_field.user = user
            field.base_field.widget.user = user


def picks_a_connection(form: forms.Form) -> bool:
    """Whether a model field of ``form`` (its submitted value, else its initial one) names
    a connection's model (``@slug/model``): the form then shows its advice on limits for
    own and small models (``includes/limits_advice.html``)."""
    for name in ("agent_model", "user_model", "judge_model"):
        if name not in form.fields:
            continue
        value = form[name].value()  # a race's agent models: a list
        for one in value if isinstance(value, list | tuple) else [value]:
            text = one.value if isinstance(one, ResolvedRoute) else str(one or "")
            if text.strip().startswith("@"):
                return True
    return False


def sides_of(data: dict, *, with_agent: bool = True) -> dict:
    """``run_create``'s / ``evaluation_create``'s keyword arguments for the two sides from
    a form's cleaned data: each side's model and connection, and its ``llm_args``
    (``with_agent=False``: all but the agent's model, e.g. a race's lanes)."""
    agent = data.get("agent_model") if with_agent else None
    customer = data.get("user_model")
    judge = data.get("judge_model")
    embedder = data.get("embedding_model")
    out = {
        "user_model": customer.model if customer is not None else None,
        "user_connection": customer.connection if customer is not None else None,
        "agent_llm_args": data.get("agent_llm_args"),
        "user_llm_args": data.get("user_llm_args"),
    }
    if judge is not None:
        out.update(judge_model=judge.model, judge_connection=judge.connection)
    if embedder is not None:
        out.update(embedding_model=embedder.model, embedding_connection=embedder.connection)
    if agent is not None:
        out.update(agent_model=agent.model, agent_connection=agent.connection)
    return out


class LLMArgsMixin:
    """A form with both sides' LLM arguments: ``agent_*`` and ``user_*`` fields, cleaned
    into ``agent_llm_args`` / ``user_llm_args``. Call :meth:`add_llm_args` in
    ``__init__``; :attr:`llm_args_fields` lists the bound fields for the template."""

    def add_llm_args(self, *, agent: bool = True) -> None:
        self._llm_sides = (("agent", "Agent"),) if agent else ()
        self._llm_sides += (("user", "Customer"),)
        self._llm_names = [
            name
            for side, who in self._llm_sides
            for name in add_llm_args_fields(self, side=side, who=who)
        ]

    @property
    def llm_args_fields(self) -> list:
        return [self[name] for name in self._llm_names]

    def clean_llm_args(self, data: dict) -> None:
        for side, _ in self._llm_sides:
            data[f"{side}_llm_args"] = llm_args_from(self, data, side=side)


_ARG_FIELDS = ("temperature", "top_p", "max_tokens", "reasoning_effort", "extras")


_JUDGE_HELP = (
    "τ²'s natural-language judge, for tasks whose reward needs it; τ²'s own default is gpt-4o-mini."
)


def judge_field(
    *, empty_label: str = "The customer's model", help_text: str = _JUDGE_HELP
) -> RouteField:
    """The NL judge's picker: empty, the customer's model judges (the judge runs only for
    tasks whose reward needs it, or with ``TAU2_NL_JUDGE=always``) — or, where there is
    no customer (a re-grade), what ``empty_label`` says."""
    return RouteField(
        role="judge",
        label="NL judge model",
        required=False,
        optional=True,
        empty_label=empty_label,
        help_text=help_text,
    )


class EmbeddingField(RouteField):
    """The connection model that embeds for a knowledge domain's embedding retrieval
    configuration (banking_knowledge's ``openai_embeddings``…): a model of a connection
    that serves OpenAI's embeddings API (``POST /embeddings``), never the router, which
    has none. Its name is sent as is: pick the model τ² names for the configuration
    (text-embedding-3-large, qwen3-embedding-8b) or say so in its name if it is another."""

    def __init__(self, **kw):
        kw.setdefault("label", "Embeddings model")
        kw.setdefault(
            "help_text",
            "Only for a retrieval configuration that embeds (openai_embeddings, "
            "qwen_embeddings and their _grep variants): the connection model that embeds "
            "the bank's documents and the agent's searches, on that connection's key, "
            "priced and counted against its budget like the other calls. τ² uses "
            "text-embedding-3-large for the openai_ ones and qwen3-embedding-8b for the "
            "qwen_ ones; another model gives other search results (the run records which). "
            "The documents are embedded once per connection model and kept for later runs.",
        )
        super().__init__(role="embeddings", required=False, optional=True, empty_label="None", **kw)

    def clean(self, value) -> ResolvedRoute | None:
        route = super().clean(value)
        if route is None:
            return None
        if route.connection is None:
            raise forms.ValidationError(
                "Embeddings run on a connection: Hugging Face's router has no embeddings "
                "API. Pick a model of an OpenAI, OpenRouter or OpenAI-compatible connection.",
                code="invalid_model",
            )
        if route.connection.kind not in EMBEDDING_PROVIDERS:
            raise forms.ValidationError(
                f"{route.connection.name} is a {route.connection.get_kind_display()} "
                "connection, which has no OpenAI embeddings API: pick a model of an OpenAI, "
                "OpenRouter or OpenAI-compatible connection.",
                code="invalid_model",
            )
        return route


def add_llm_args_fields(form: forms.Form, *, side: str, who: str) -> list[str]:
    """Add ``<side>_temperature`` … ``<side>_extras`` to ``form``; returns their names.

    The temperature starts at τ²'s default (0); empty means the provider's default, as
    when ``tau2 run``'s flag leaves it out.
    """
    flag = "--agent-llm-args" if side == "agent" else "--user-llm-args"
    fields = {
        f"{side}_temperature": forms.FloatField(
            label=f"{who} temperature",
            required=False,
            min_value=0,
            max_value=2,
            initial=0.0,
            help_text="τ²'s default is 0; empty: the provider's default.",
        ),
        f"{side}_top_p": forms.FloatField(
            label=f"{who} top_p", required=False, min_value=0, max_value=1
        ),
        f"{side}_max_tokens": forms.IntegerField(
            label=f"{who} max_tokens", required=False, min_value=1, max_value=1_000_000
        ),
        f"{side}_reasoning_effort": forms.ChoiceField(
            label=f"{who} reasoning effort",
            required=False,
            choices=[("", "the model's default"), *((e, e) for e in REASONING_EFFORTS)],
        ),
        f"{side}_extras": forms.CharField(
            label=f"{who} provider extras (JSON)",
            required=False,
            max_length=4096,
            widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false"}),
            help_text=f'Passed as they are, as in tau2 run {flag}: e.g. {{"top_k": 20}}.',
        ),
    }
    for name, field in fields.items():
        field.widget.attrs.setdefault("data-testid", name.replace("_", "-"))
        form.fields[name] = field
    return list(fields)


def llm_args_from(form: forms.Form, data: dict, *, side: str) -> dict | None:
    """τ²'s ``llm_args`` for ``side`` from cleaned ``data``; adds the form's errors and
    returns ``None`` when they are wrong. A submission that holds none of the side's
    fields (an API client's, an old link's) gets ``None`` too: τ²'s default, as
    ``tau2 run`` without the flag. A page's form always sends them (empty: left out)."""
    if form.is_bound and not any(f"{side}_{name}" in form.data for name in _ARG_FIELDS):
        return None
    given = {name: data.get(f"{side}_{name}") for name in _ARG_FIELDS}
    try:
        return llm_args_clean(**given)
    except LLMArgsError as exc:
        form.add_error(f"{side}_{exc.field}", str(exc))
        return None


def llm_args_initial(args: dict | None, *, side: str) -> dict:
    """Form initial values that show stored ``args`` again (e.g. "run it again")."""
    if args is None:
        return {}
    named = {k: args[k] for k in _ARG_FIELDS[:4] if k in args}
    extras = {k: v for k, v in args.items() if k not in named}
    initial = {f"{side}_{k}": v for k, v in named.items()}
    initial[f"{side}_temperature"] = args.get("temperature", "")
    if extras:
        initial[f"{side}_extras"] = json.dumps(extras)
    return initial
