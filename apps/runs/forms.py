"""The forms that start runs and label them, and what turns a start form's answers into
one :class:`~apps.runs.spec.RunSpec` (:func:`spec_from`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import forms
from django.conf import settings

from apps.bounds import integer_field
from apps.connections.llm_routes import first_connection_value, router_refusal
from apps.connections.picker import (
    EmbeddingField,
    LLMArgsMixin,
    RouteField,
    for_user,
    judge_field,
)
from apps.runs import defaults
from apps.runs.models import MAX_TRIALS, ReviewLabel, Run, RunEvent
from apps.runs.spec import RunSpec, Side
from apps.tasks import selectors as task_selectors
from apps.tasks.models import Task
from tau2_env.engine import catalog

# Querystring → form field: what a link to the form may preselect.
PREFILLS = {
    "domain": "domain",
    "split": "split",
    "task": "task_id",
    "model": "agent_model",
    "user_model": "user_model",
    "max_steps": "max_steps",
    "timeout": "timeout",
    "seed": "seed",
    "trial": "trial",
}
# τ²'s LLM arguments a link may preselect too ("run it again with another model").
_ARGPREFILLS = tuple(
    f"{side}_{name}"
    for side in ("agent", "user")
    for name in ("temperature", "top_p", "max_tokens", "reasoning_effort", "extras")
)


def query_text(value) -> str:
    """A submitted value as a query may use it: no NUL byte, at most 255 characters."""
    return str(value or "").replace("\x00", "").strip()[:255]


def customer_initial(*, user) -> str:
    """The customer's model a form starts on for ``user``: the server's
    (``defaults.customer_model``, on Hugging Face's router); for a person who cannot use
    the router (a developer sign-in, a revoked sign-in), the first model of a connection
    they may use — what they can run — or the server's when they may use none (a start
    then says what to fix)."""
    server = defaults.customer_model()
    if user is None or router_refusal(user=user) is None:
        return server
    return first_connection_value(user) or server


def run_form_initial(params, *, user=None) -> dict:
    """The run form's initial values (the race form's too): what a link preselects
    (:data:`PREFILLS`, :data:`ARG_PREFILLS`) over the server's domain and the customer
    ``user`` can run (``defaults.customer_model``)."""
    given = {field: query_text(params.get(name)) for name, field in PREFILLS.items()}
    given.update({name: str(params.get(name) or "")[:4096] for name in _ARGPREFILLS})
    return {
        "domain": settings.TAU2_DOMAIN,
        "user_model": customer_initial(user=user),
        **{field: value for field, value in given.items() if value},
    }


def _side(route, llm_args: dict[str, Any] | None = None) -> Side:
    """A picker's route (a ``ResolvedRoute``; None: left empty) as a spec's side."""
    if route is None:
        return Side(llm_args=llm_args)
    return Side(route.model, route.connection, llm_args)


def spec_from(data: Mapping[str, Any], *, lanes: bool = False) -> RunSpec:
    """The :class:`RunSpec` a start form's cleaned ``data`` asks for (the run form, a
    race's, an evaluation's): each side's picker and LLM arguments, the judge, the
    limits, the seed and the mode it has; what it leaves empty, the spec's default.
    ``lanes``: a race's, whose agent models are its lanes (the spec's agent holds only
    their LLM arguments)."""
    given = {
        name: data[name]
        for name in ("max_steps", "max_errors", "seed", "mode", "retrieval_config", "timeout")
        if data.get(name) not in (None, "")
    }
    judge, embedder = data.get("judge_model"), data.get("embedding_model")
    return RunSpec(
        agent=_side(None if lanes else data.get("agent_model"), data.get("agent_llm_args")),
        customer=_side(data.get("user_model"), data.get("user_llm_args")),
        judge=_side(judge) if judge is not None else None,
        embedder=_side(embedder) if embedder is not None else None,
        **given,
    )


class RetrievalSelect(forms.Select):
    """The retrieval configurations, those this server cannot run disabled with why (in
    their title and their text)."""

    def __init__(self, *args, refusals: Mapping[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.refusals = dict(refusals or {})

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        why = self.refusals.get(str(value))
        if why:
            option["attrs"].update(disabled=True, title=why)
            option["label"] = f"{label} — cannot run here: {why}"
        return option


def retrieval_field() -> forms.ChoiceField:
    """A knowledge domain's retrieval configuration (``tau2 run --retrieval-config``):
    every one τ² has, for every domain the catalogue knows that has some (banking_knowledge
    on τ² 1.x); those this server cannot run are shown disabled with the reason."""
    options, refusals, defaults_ = [], {}, []
    for domain in catalog.domain_names():
        default = catalog.default_retrieval_config(domain)
        if default is not None:
            defaults_.append(f"{domain}: {default}")
        for config in catalog.retrieval_configs(domain):
            options.append((config.name, config.name))
            if config.refusal:
                refusals[config.name] = config.refusal
    default_label = "the domain's default" + (f" ({', '.join(defaults_)})" if defaults_ else "")
    return forms.ChoiceField(
        label="Retrieval",
        required=False,
        choices=[("", default_label), *options],
        widget=RetrievalSelect(refusals=refusals, attrs={"data-testid": "retrieval-config"}),
        help_text="banking_knowledge only: how the agent reaches the bank's documents, as "
        "tau2 run --retrieval-config. The offline ones run here, and those that embed with "
        "an embeddings model on one of your connections.",
    )


def retrieval_clean(form: forms.Form, data: dict[str, Any], domain: str | None) -> None:
    """Refuses a retrieval configuration ``domain`` has not, or this server cannot run,
    on the form's ``retrieval_config`` field, saying why; one that embeds without an
    embeddings model (or an embeddings model for one that does not), on the form's
    ``embedding_model`` field — and on a form without one (a race's), on
    ``retrieval_config``: it cannot name one."""
    chosen = data.get("retrieval_config") or None
    if not domain:
        return
    embeds = "embedding_model" in form.fields
    given = data.get("embedding_model") is not None
    why = catalog.retrieval_refusal(domain=domain, retrieval_config=chosen, embeddings=given)
    if why is None:
        return
    if catalog.retrieval_refusal(domain=domain, retrieval_config=chosen) is not None:
        form.add_error("retrieval_config", why)
    elif embeds:
        form.add_error("embedding_model", why)
    else:
        form.add_error(
            "retrieval_config",
            f"{why} — this form has no embeddings model: start a run, an evaluation or a "
            "play session for it",
        )


def timeout_field() -> forms.FloatField:
    """τ²'s wall-clock limit of each conversation in seconds (``tau2 run --timeout``),
    empty as τ²'s default: none. Where the installed τ² has no --timeout (0.2) the field
    says so and is disabled; a value sent anyway is refused by :func:`timeout_clean`."""
    why = catalog.timeout_refusal(1.0)
    field = forms.FloatField(
        label="Timeout (seconds)",
        required=False,
        min_value=0.001,
        max_value=catalog.MAX_TIMEOUT,
        help_text=why
        or "Empty: none. As tau2 run --timeout: τ² ends a conversation still going after "
        "this many seconds (ended by timeout, scored 0).",
        widget=forms.NumberInput(attrs={"data-testid": "timeout", "step": "any"}),
    )
    if why:
        field.widget.attrs.update(disabled=True, title=why)
    return field


def timeout_clean(form: forms.Form, data: dict[str, Any]) -> None:
    """Refuses a timeout on the form's ``timeout`` field, saying why, where τ² has none."""
    why = catalog.timeout_refusal(data.get("timeout"))
    if why:
        form.add_error("timeout", why)


def has_retrieval() -> bool:
    """Whether any domain the catalogue knows has retrieval configurations."""
    return any(catalog.retrieval_configs(d) for d in catalog.domain_names())


class RunForm(LLMArgsMixin, forms.Form):
    """One model run: a task (chosen by domain and id; the split only narrows the picker),
    the agent and customer models (each on the router or a connection the person may
    use) with τ²'s LLM arguments, the step limit and the seed. Pass ``user``."""

    domain = forms.ChoiceField(label="Domain")
    split = forms.CharField(label="Split", max_length=32, required=False)
    task_id = forms.CharField(
        label="Task",
        max_length=255,
        help_text="Type words of its title or its id, then pick it from the list.",
    )
    agent_model = RouteField(
        role="agent",
        label="Agent model",
        help_text="On Hugging Face Inference Providers (pin a provider, or let the router "
        "pick the fastest or the cheapest), or on a connection.",
    )
    user_model = RouteField(
        role="customer",
        label="Customer model",
        required=False,
        help_text="The simulated customer. taubench.com's leaderboard uses gpt-4.1 (or "
        "gpt-5.2): other customers give numbers that are not comparable with it.",
    )
    judge_model = judge_field()
    max_steps = integer_field(
        Run, "max_steps", label="Step limit", min_value=1, initial=defaults.MAX_STEPS
    )
    retrieval_config = forms.CharField(required=False)  # retrieval_field(), set per form
    timeout = timeout_field()
    embedding_model = EmbeddingField()
    seed = integer_field(Run, "given_seed", label="Seed", required=False)
    # Set only when the form repeats an evaluation's trial ("run with another model"), so
    # the new run gets that trial's seed; a run started from scratch is trial 0.
    trial = integer_field(
        Run,
        "seed_trial",
        widget=forms.HiddenInput,
        required=False,
        min_value=0,
        max_value=MAX_TRIALS - 1,
    )

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.add_llm_args()
        for_user(self, user)
        self.fields["domain"].choices = [(d.name, d.name) for d in task_selectors.domain_list()]
        self.fields["domain"].widget.attrs["data-testid"] = "domain"
        self.fields["retrieval_config"] = retrieval_field()
        self.fields["task_id"].widget.attrs.update(
            {
                "data-testid": "task-input",
                "autocomplete": "off",
                "spellcheck": "false",
                "aria-controls": "task-picker",  # the list of matching tasks under it
            }
        )
        self.fields["max_steps"].max_value = settings.TAU2_RUN_MAX_STEPS
        self.fields["max_steps"].initial = defaults.max_steps()  # the cap, if lower
        self.fields["max_steps"].validators.append(
            forms.IntegerField(max_value=settings.TAU2_RUN_MAX_STEPS).validators[-1]
        )

    def clean(self):
        data = super().clean()
        domain, task_id = data.get("domain"), data.get("task_id")
        if domain and task_id:
            task = Task.objects.filter(domain_id=domain, task_id=task_id).first()
            if task is None:
                self.add_error(
                    "task_id",
                    f"No task {task_id!r} in {domain}: pick one from the list, or choose "
                    "the domain it belongs to.",
                )
            data["task"] = task
        retrieval_clean(self, data, domain)
        timeout_clean(self, data)
        self.clean_llm_args(data)
        return data


class LabelForm(forms.Form):
    """A review label from the run page: on the run, or on its message ``seq``."""

    seq = integer_field(RunEvent, "seq", widget=forms.HiddenInput, required=False)
    category = forms.ChoiceField(choices=ReviewLabel.Category.choices)
    severity = forms.ChoiceField(
        choices=ReviewLabel.Severity.choices, initial=ReviewLabel.Severity.BENIGN
    )
    note = forms.CharField(
        required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2})
    )

    def __init__(self, *args, seq: int | None = None, **kwargs):
        # One form per message on the page: ids must not collide.
        kwargs.setdefault("auto_id", f"label-{'run' if seq is None else seq}-%s")
        kwargs.setdefault("initial", {"seq": seq})
        super().__init__(*args, **kwargs)


class ForkForm(forms.Form):
    """A fork of a finished run at one of its messages (``apps.runs.forks``): who goes on
    in the agent's place, and the customer's model (empty: the run's own). Pass ``user``."""

    MODEL, SEED, PLAY = "model", "seed", "play"

    at = integer_field(RunEvent, "seq", widget=forms.HiddenInput)
    continue_with = forms.ChoiceField(
        label="Continue with",
        widget=forms.RadioSelect,
        initial=MODEL,
        choices=[
            (MODEL, "another agent model"),
            (SEED, "the same agent model, another seed"),
            (PLAY, "me: take over as a play session"),
        ],
    )
    agent_model = RouteField(role="agent", label="Agent model", required=False, optional=True)
    seed = integer_field(Run, "given_seed", label="Seed", required=False, min_value=0)
    user_model = RouteField(
        role="customer",
        label="Customer model",
        required=False,
        optional=True,
        empty_label="The run's own customer model",
        help_text="Empty: the run's own customer model goes on.",
    )

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        for_user(self, user)

    def clean(self):
        data = super().clean()
        how = data.get("continue_with")
        if how == self.MODEL and not data.get("agent_model") and "agent_model" not in self.errors:
            self.add_error("agent_model", "Pick the agent model that continues it.")
        if how == self.SEED and data.get("seed") is None:
            self.add_error("seed", "Give the seed the same model goes on with.")
        return data
