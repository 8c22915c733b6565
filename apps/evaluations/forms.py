"""The form that starts an evaluation, and what it would start (the preview)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from django import forms
from django.conf import settings
from django.utils.http import urlencode

from apps.bounds import integer_field
from apps.connections.models import Connection
from apps.connections.picker import (
    EmbeddingField,
    LLMArgsMixin,
    RouteField,
    for_user,
    judge_field,
)
from apps.connections.selectors import can_manage
from apps.evaluations import selectors
from apps.evaluations.estimates import CostEstimate, evaluation_cost_estimate
from apps.evaluations.external import agent_name_problem
from apps.evaluations.models import Evaluation
from apps.evaluations.significance import Planner
from apps.runs import defaults
from apps.runs.forms import (
    customer_initial,
    retrieval_clean,
    retrieval_field,
    timeout_clean,
    timeout_field,
)
from apps.runs.models import MAX_TRIALS, Run
from apps.tasks import selectors as task_selectors
from apps.tasks.models import Task
from apps.tasks.selectors import KINDS, TaskFilters

MAX_CONCURRENCY = 64
_SEPARATORS = re.compile(r"[\s,]+")


def parse_task_ids(text: str) -> list[str]:
    """Task ids typed comma- or space-separated (τ²'s ids have neither), in order, once each."""
    return list(dict.fromkeys(t for t in _SEPARATORS.split(text or "") if t))


@dataclass(frozen=True)
class Plan:
    """The tasks an evaluation would run: ``task_ids`` (``None``: the whole ``split``),
    how many, and where they came from (``split`` is ``""`` for a chosen list)."""

    domain: str
    split: str
    task_ids: list[str] | None
    count: int
    query: str = ""

    @property
    def source(self) -> str:
        if self.task_ids is None:
            return f"the whole {self.domain}/{self.split} split"
        if self.query:
            return f"the tasks of {self.domain}/{self.split} the explorer search matches"
        return f"the chosen tasks of {self.domain}"


class EvaluationForm(LLMArgsMixin, forms.Form):
    domain = forms.ChoiceField(label="Domain")
    split = forms.ChoiceField(label="Split")
    task_ids = forms.CharField(
        label="Task ids",
        required=False,
        max_length=200_000,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Optional: comma or space separated. Empty: the whole split, or the tasks "
        "the search below matches.",
    )
    q = forms.CharField(
        label="Explorer search",
        required=False,
        max_length=200,
        help_text="Optional: the tasks of the split whose title, reason for call, id or tool "
        "names contain every word, as on the task explorer.",
    )
    kind = forms.ChoiceField(
        label="Kind",
        required=False,
        choices=[("", "all"), ("write", "changes the database"), ("read", "read-only")],
    )
    agent_model = RouteField(
        role="agent",
        label="Agent model",
        required=False,
        help_text="On Hugging Face Inference Providers (pin a provider, or let the router "
        "pick the fastest or the cheapest), or on a connection.",
    )
    external_agent = forms.CharField(
        label="Or your own agent",
        required=False,
        max_length=100,
        help_text="Name and version, e.g. support-bot@2026-12-03: instead of a model, your "
        "program plays the agent, pulling this evaluation's episodes over MCP or OpenEnv "
        "with a studio key (see Connect an agent).",
    )
    user_model = RouteField(
        role="customer",
        label="Customer model",
        required=False,
        help_text="The simulated customer. taubench.com's leaderboard uses gpt-4.1 (or "
        "gpt-5.2): other customers give numbers that are not comparable with it.",
    )
    judge_model = judge_field()
    mode = forms.ChoiceField(
        label="Mode",
        choices=Run.Mode.choices,
        initial=Run.Mode.DEFAULT,
        required=False,
        help_text="τ²'s ablations: No-User (tau2 run --agent llm_agent_solo --user "
        "dummy_user: the agent gets the ticket and every tool, telecom only) or Oracle plan "
        "(--agent llm_agent_gt: the agent is given the expected actions).",
    )
    retrieval_config = forms.CharField(required=False)  # retrieval_field(), set per form
    embedding_model = EmbeddingField()
    num_trials = integer_field(
        Evaluation,
        "num_trials",
        label="Trials (k)",
        min_value=1,
        max_value=MAX_TRIALS,
        initial=defaults.NUM_TRIALS,
        help_text=f"Each task runs k times (1–{MAX_TRIALS}); pass^k needs k trials.",
    )
    seed = integer_field(
        Evaluation,
        "seed",
        label="Seed",
        required=False,
        initial=defaults.SEED,
        help_text="Each trial's seed derives from it as tau2 run --seed derives them.",
    )
    max_steps = integer_field(
        Evaluation, "max_steps", label="Step limit", min_value=1, initial=defaults.MAX_STEPS
    )
    max_errors = integer_field(
        Evaluation,
        "max_errors",
        label="Error limit",
        min_value=1,
        max_value=1000,
        initial=defaults.MAX_ERRORS,
    )
    timeout = timeout_field()
    concurrency = integer_field(
        Evaluation,
        "concurrency",
        label="Concurrency",
        min_value=1,
        max_value=MAX_CONCURRENCY,
        initial=8,
        help_text="Runs of this evaluation at once (the server's per-person cap also applies).",
    )
    name = forms.CharField(label="Name", max_length=200, required=False)

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.add_llm_args()
        for_user(self, user)
        self.domains = list(task_selectors.domain_list())
        self.fields["domain"].choices = [(d.name, d.name) for d in self.domains]
        self.fields["split"].choices = sorted(
            {(s.name, s.name) for d in self.domains for s in d.splits.all()}
        )
        self.fields["max_steps"].max_value = settings.TAU2_RUN_MAX_STEPS
        self.fields["max_steps"].initial = defaults.max_steps()  # the cap, if lower
        self.fields["max_steps"].validators.append(
            forms.IntegerField(max_value=settings.TAU2_RUN_MAX_STEPS).validators[-1]
        )
        self.fields["user_model"].initial = customer_initial(user=user)
        self.fields["retrieval_config"] = retrieval_field()

    def split_options(self) -> list[dict]:
        """Every domain's splits for the split list (the page shows the chosen domain's)."""
        return [
            {"domain": d.name, "name": s.name, "size": s.size}
            for d in self.domains
            for s in d.splits.all()
        ]

    def _clean_agent(self, data: dict) -> None:
        """One agent: a model, or the team's own (named; default mode only)."""
        external = (data.get("external_agent") or "").strip()
        data["external_agent"] = external
        if external:
            problem = agent_name_problem(external)
            if problem:
                self.add_error("external_agent", problem)
            if self.data.get("agent_model"):
                self.add_error("external_agent", "Choose a model or your own agent, not both.")
            if data.get("mode") not in (None, "", Run.Mode.DEFAULT):
                self.add_error("mode", "Your own agent plays the default mode only.")
        elif data.get("agent_model") is None and "agent_model" not in self.errors:
            self.add_error("agent_model", "Pick an agent model, or name your own agent.")

    def clean(self):
        data = super().clean()
        self.clean_llm_args(data)
        self._clean_agent(data)
        domain, split = data.get("domain"), data.get("split")
        retrieval_clean(self, data, domain)
        timeout_clean(self, data)
        if not domain or not split:
            return data
        splits = next((d.splits.all() for d in self.domains if d.name == domain), [])
        split_row = next((s for s in splits if s.name == split), None)
        if split_row is None:
            self.add_error("split", f"{domain} has no split {split!r}.")
            return data
        ids = parse_task_ids(data.get("task_ids", ""))
        q, kind = data.get("q", ""), data.get("kind", "")
        if ids:
            found = set(
                Task.objects.filter(domain_id=domain, task_id__in=ids).values_list(
                    "task_id", flat=True
                )
            )
            missing = [t for t in ids if t not in found]
            if missing:
                shown = ", ".join(missing[:5]) + (" …" if len(missing) > 5 else "")
                self.add_error("task_ids", f"No task {shown} in {domain}.")
                return data
            data["plan"] = Plan(domain=domain, split="", task_ids=ids, count=len(ids))
        elif q or kind in KINDS:
            filters = TaskFilters(domain=domain, split=split, q=" ".join(q.split()), kind=kind)
            matched = list(
                task_selectors.task_list(filters=filters, split=split_row).values_list(
                    "task_id", flat=True
                )
            )
            if not matched:
                self.add_error("q", f"No task of {domain}/{split} matches this search.")
                return data
            data["plan"] = Plan(
                domain=domain,
                split=split,
                task_ids=matched,
                count=len(matched),
                query=urlencode(filters.as_query()),
            )
        else:
            data["plan"] = Plan(domain=domain, split=split, task_ids=None, count=split_row.size)
        return data


class RegradeForm(forms.Form):
    """A re-grade's choice: τ²'s NL-assertion judge for the tasks whose reward needs it,
    picked as a run's judge is (a model the person may use); empty, those are not
    re-scored."""

    judge_model = judge_field(
        empty_label="No judge: those tasks are not re-scored",
        help_text="τ²'s natural-language judge, on your Hugging Face token or a connection "
        "you may use; its calls count against that connection's budget.",
    )

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        for_user(self, user)


@dataclass(frozen=True)
class Preview:
    """What starting would do: the tasks, the runs (tasks × k) and a cost estimate.

    ``errors`` are the reasons it cannot say (yet); ``estimate`` is ``None`` until an
    agent model is chosen; ``planner`` (the expected 95% half-width of pass^1) once the
    tasks and the trials are known. ``connection``: the one the agent model runs on
    (``None``: Hugging Face's router), so that advice on an unpriced model fits where it
    runs — its prices are entered on the connection (``may_price``: by this person), not
    chosen among the router's providers. ``whole_split``: False when the tasks are a
    subset (not every task of a split), which the team leaderboard does not rank;
    ``split_size`` the split's task count, when there is one.
    """

    plan: Plan | None
    trials: int | None
    model_label: str
    estimate: CostEstimate | None
    errors: list[str]
    planner: Planner | None = None
    connection: Connection | None = None
    may_price: bool = False
    whole_split: bool = True
    split_size: int | None = None

    @property
    def runs(self) -> int | None:
        if self.plan is None or self.trials is None:
            return None
        return self.plan.count * self.trials


def preview_for(form: EvaluationForm) -> Preview:
    """The preview of a bound form, valid or not: what is known so far."""
    form.is_valid()
    data = form.cleaned_data
    plan, trials, model = data.get("plan"), data.get("num_trials"), data.get("agent_model")
    # An agent model not chosen yet is no error to show; one that cannot run is.
    errors = [
        str(error)
        for name in ("domain", "split", "task_ids", "q", "kind", "num_trials", "agent_model")
        if name != "agent_model" or form.data.get(name)
        for error in form.errors.get(name, [])
    ]
    estimate = None
    if plan is not None and trials is not None and model is not None:
        estimate = evaluation_cost_estimate(
            domain=plan.domain, runs=plan.count * trials, prices=model.prices
        )
    planner = None
    if plan is not None and trials is not None and plan.count:
        planner = selectors.trials_planner(domain=plan.domain, tasks=plan.count, trials=trials)
    connection = model.connection if model is not None else None
    size = next(
        (
            s["size"]
            for s in form.split_options()
            if plan is not None and (s["domain"], s["name"]) == (plan.domain, plan.split)
        ),
        None,
    )
    return Preview(
        # As evaluation_create sets Evaluation.full_split: every task of the split.
        whole_split=plan is None or plan.task_ids is None or plan.count == size,
        split_size=size,
        planner=planner,
        plan=plan,
        trials=trials,
        model_label=f"{model.value} · {model.where} · {model.price_label}" if model else "",
        estimate=estimate,
        errors=errors,
        connection=connection,
        may_price=connection is not None
        and can_manage(form.fields["agent_model"].user, connection),
    )
