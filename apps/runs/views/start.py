"""Starting runs: the run form and the task picker every one-task form uses (run, race,
play), and running a finished run again."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.http import require_POST

from apps.accounts.access import can_start, signin_required_to_start
from apps.connections.picker import llm_args_initial, sides_of
from apps.runs import defaults, selectors, services
from apps.runs.forms import RunForm
from apps.runs.models import Run
from apps.tasks import selectors as task_selectors
from apps.tasks.cards import TaskCard, task_cards
from apps.tasks.models import Domain, Task
from apps.tasks.selectors import TaskFilters

PICKER_SIZE = 50
# Querystring → form field: what a link to the form may preselect.
_PREFILLS = {
    "domain": "domain",
    "split": "split",
    "task": "task_id",
    "model": "agent_model",
    "user_model": "user_model",
    "max_steps": "max_steps",
    "seed": "seed",
    "trial": "trial",
}
# τ²'s LLM arguments a link may preselect too ("run it again with another model").
_ARG_PREFILLS = tuple(
    f"{side}_{name}"
    for side in ("agent", "user")
    for name in ("temperature", "top_p", "max_tokens", "reasoning_effort", "extras")
)


def query_text(value) -> str:
    """A submitted value as a query may use it: no NUL byte, at most 255 characters."""
    return str(value or "").replace("\x00", "").strip()[:255]


@dataclass(frozen=True)
class TaskPicker:
    """The picker under the task field: the domain (with its splits for the split list),
    the split listed, what was typed, the first matching tasks (and their cards: what
    tells them apart) and how many match."""

    domain: Domain | None
    split: str
    q: str
    tasks: list[Task]
    count: int
    link_query: str  # the form's other choices, kept by the no-JS links of the list
    exact: bool = False  # what was typed is a task id of the domain (listed first)
    form_url: str = ""  # the form the no-JS links go back to (run, race, play)

    @property
    def cards(self) -> list[TaskCard]:
        return task_cards(self.tasks)


def _split_listed(domain: Domain, wanted: str, task_id: str) -> str:
    """``wanted`` if the domain has it; else the default split (or base, or the largest),
    preferring one that holds ``task_id`` when that names a task."""
    splits = [s.name for s in domain.splits.all()]  # largest first
    if wanted in splits:
        return wanted
    order = list(dict.fromkeys([settings.TAU2_SPLIT, "base", *splits]))
    order = [s for s in order if s in splits]
    if task_id:
        holding = set(
            Task.objects.filter(domain_id=domain.name, task_id=task_id).values_list(
                "splits__name", flat=True
            )
        )
        order = [s for s in order if s in holding] + order
    return order[0] if order else ""


def picker_form_url(value: str) -> str:
    """The form a picker's links lead back to: a path of this site, else the run form."""
    if value.startswith("/") and url_has_allowed_host_and_scheme(value, allowed_hosts=None):
        return value.split("?", 1)[0]
    return reverse("runs:new")


def task_picker(
    *, domain: str, split: str, q: str, keep: dict | None = None, form_url: str = ""
) -> TaskPicker:
    """The tasks of ``domain``/``split`` whose title, reason, id or tools contain every word
    of ``q`` (as on the explorer), in τ²'s order; the task whose id is ``q`` comes first,
    whatever its split. Its links lead back to ``form_url`` (default: the run form)."""
    form_url = picker_form_url(form_url)
    row = next((d for d in task_selectors.domain_list() if d.name == domain), None)
    if row is None:
        return TaskPicker(
            domain=None, split="", q=q, tasks=[], count=0, link_query="", form_url=form_url
        )
    split = _split_listed(row, split, q)
    matches = task_selectors.task_list(filters=TaskFilters(domain=row.name, split=split, q=q))
    tasks = list(task_selectors.task_card_fields(matches)[:PICKER_SIZE])
    count = matches.count()
    exact = task_selectors.task_card_fields(Task.objects.filter(domain=row, task_id=q)).first()
    if exact is not None:
        tasks = [exact, *(t for t in tasks if t.pk != exact.pk)][:PICKER_SIZE]
        count += 0 if matches.filter(pk=exact.pk).exists() else 1
    link = {"domain": row.name, "split": split, **{k: v for k, v in (keep or {}).items() if v}}
    return TaskPicker(
        domain=row,
        split=split,
        q=q,
        tasks=tasks,
        count=count,
        link_query=urlencode(link),
        exact=exact is not None,
        form_url=form_url,
    )


def run_form_initial(params) -> dict:
    given = {field: query_text(params.get(name)) for name, field in _PREFILLS.items()}
    given.update({name: str(params.get(name) or "")[:4096] for name in _ARG_PREFILLS})
    return {
        "domain": settings.TAU2_DOMAIN,
        "user_model": defaults.customer_model(),
        **{field: value for field, value in given.items() if value},
    }


@signin_required_to_start
def run_new(request):
    """``GET``: the form, preselected by ``?domain=&split=&task=&model=&user_model=&max_steps=
    &seed=&trial=``; ``POST``: start the run."""
    form = RunForm(request.POST or None, initial=run_form_initial(request.GET), user=request.user)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        model = data["agent_model"]  # a ResolvedRoute: where it runs, what to charge
        try:
            run = services.run_create(
                user=request.user,
                task=data["task"],
                max_steps=data["max_steps"],
                seed=data.get("seed"),
                trial=data.get("trial") or 0,
                agent_prices=model.prices,
                **sides_of(data),
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            return redirect(run)
    value = {name: query_text(form[field].value()) for name, field in _PREFILLS.items()}
    picker = task_picker(
        domain=value.pop("domain"),
        split=value.pop("split"),
        q=value.pop("task"),
        keep=value,
        form_url=reverse("runs:new"),
    )
    model_fields = [
        form[name] for name in ("agent_model", "user_model", "judge_model", "max_steps", "seed")
    ]
    return render(
        request,
        "runs/new.html",
        {
            "form": form,
            "picker": picker,
            "model_fields": model_fields,
            "args_fields": form.llm_args_fields,
            # "Run with another model…": the model it ran, not preselected again.
            "instead_of": query_text(request.GET.get("instead_of")),
        },
        status=400 if form.errors else 200,  # a refused start is a client error
    )


def run_task_picker(request):
    """The picker's list for ``?domain=&split=&task_id=&form=`` (htmx), and the domain's
    splits; ``form`` is the path of the form it sits in."""
    params = request.GET
    picker = task_picker(
        domain=query_text(params.get("domain")),
        split=query_text(params.get("split")),
        q=query_text(params.get("task_id")),
        form_url=query_text(params.get("form")),
    )
    return render(request, "includes/task_picker.html", {"picker": picker, "oob": True})


def rerun_query(run: Run, *, same_model: bool = True) -> dict:
    """The run form's querystring that repeats ``run``'s settings; ``same_model=False``
    (for another model): the agent model is left to pick, the run's named as ``instead_of``."""
    kept = services.run_settings_of(run)
    model = {"model": run.agent_value} if same_model else {"instead_of": run.agent_value}
    query = {
        "domain": run.domain,
        "task": run.task.task_id,
        **model,
        "user_model": run.user_value,
        "max_steps": kept["max_steps"],
        "seed": kept["seed"],
        "trial": kept["trial"] or None,
        **llm_args_initial(run.agent_llm_args, side="agent"),
        **llm_args_initial(run.user_llm_args, side="user"),
    }
    return {name: value for name, value in query.items() if value is not None}


def rerun_offer(user, run: Run) -> dict | None:
    """What the run page offers ``user`` to start from ``run``: nothing unless they may
    start runs and it is a model run; else the prefilled form's URL ("another model")."""
    if not can_start(user) or run.kind != Run.Kind.MODEL:
        return None
    query = urlencode(rerun_query(run, same_model=False))
    return {"form_url": f"{reverse('runs:new')}?{query}"}


@require_POST
def run_rerun(request, pk: int):
    """Run a finished run again (or retry a failed one) with the same settings: a new run."""
    if not can_start(request.user):
        raise PermissionDenied("Sign in to start runs.")
    old = selectors.run_get(pk=pk)
    try:
        run = services.run_rerun(run=old, by=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect(f"{reverse('runs:new')}?{urlencode(rerun_query(old))}")
    return redirect(run)
